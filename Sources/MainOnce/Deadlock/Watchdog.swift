internal import Dispatch
internal import Synchronization

/// The watchdog thread's bookkeeping, kept in the ``DetectorState``.
struct WatchdogState {
  /// Parked without a timeout, because nothing has been watched for a while.
  var isParked = false
  /// Rounds in a row with nothing to watch.
  var idleRounds = 0

  /// Whether the watchdog must be started or woken for new work; clears the parked mark.
  mutating func needsStart() -> Bool {
    defer { isParked = false }
    return isParked || !Watchdog.isRunning
  }
}

/// The watchdog's notes on one subject whose callers wait.
struct StallWatch {
  /// A thread in a subject's way, and how much it had run.
  struct Baseline: Equatable {
    let thread: ThreadID
    let progress: ThreadProgress
  }

  let subject: any WaitSubject
  /// When it looks next; `nil` until the first look, due one stall timeout after the oldest
  /// caller started waiting.
  var nextLook: UInt64?
  /// The thread in the way at the last look, and how much it had run: what the next look
  /// compares with to tell a thread that is stuck from one that makes progress.
  var baseline: Baseline?
  /// Set once a look has found the thread in the way blocked without progress: the last word
  /// on this subject.
  var isEscalated = false
  /// When the oldest caller started waiting, as of the first report; `nil` until reported.
  var waitingSince: UInt64?

  var isReported: Bool { waitingSince != nil }
}

/// Looks at callers that keep waiting, and at cycles not proven yet.
///
/// One thread of MainOnce's own, started by the first caller that waits for work in main
/// context, in any form: a blocked thread, a suspended task, a kept completion handler. It
/// watches subjects (a flight, an `AsyncMainLazy` build), not threads: a subject whose callers
/// have waited the stall timeout is reported once, with every caller listed, then looked at
/// again every stall timeout. It is reported a second time only when the thread in its way is
/// found blocked in `futex` without having run at all since the look before; that is the only
/// stall finding that stops the process, with ``DeadlockDetection/Response/abort``. When a
/// reported subject ends, the watchdog says so.
///
/// It also looks again at each wait that closed a cycle it could not prove yet (see
/// ``Evidence``), a millisecond later, then two, doubling up to the stall timeout, until the
/// cycle is proven or gone: a thread that computes before it blocks is caught once it blocks.
///
/// Every clock reading it compares with is taken after the callers it compares were read, and
/// every difference saturates: a caller that arrives meanwhile never makes a time negative.
/// Reports go through ``DeadlockReport/deliver(at:)``, which never waits for a report handler
/// but a bounded time, before a stop.
enum Watchdog {
  private static let wakeUp = DispatchSemaphore(value: 0)
  private static let started = Atomic(false)
  static let idleRoundsBeforeParking = 60

  static var isRunning: Bool { started.load(ordering: .relaxed) }

  /// Starts the watchdog thread, or wakes it.
  static func start() {
    guard !started.exchange(true, ordering: .acquiringAndReleasing) else { return wake() }
    let status = Platform.startThread { Watchdog.run() }
    if status != 0 {
      Platform.writeToStandardError(
        "MainOnce: cannot start the deadlock watchdog (pthread_create: \(status)); stalls will"
          + " not be reported\n")
    }
  }

  /// Makes the watchdog look again now: a setting has changed, or there is new work.
  static func wake() {
    if isRunning { wakeUp.signal() }
  }

  private static func run() -> Never {
    while true {
      let settings = DeadlockDetection.Snapshot.current
      // The subjects' callers are read first, each under its own lock, and the clock after.
      let subjects = Detector.state.withLock { $0.subjectsToWatch() }
      let snapshots = subjects.map { ($0, $0.stallSnapshot()) }
      let due = Detector.state.withLock { $0.dueWork(snapshots, settings: settings) }
      for ended in due.ended {
        DeadlockReport.stallEnded(
          of: ended.label, finished: ended.finished, waitingSince: ended.waitingSince
        ).deliver(at: nil)
      }
      for look in due.looks {
        let finding = look.sample()
        guard let isStuck = Detector.state.withLock({ $0.record(finding, of: look) }) else {
          continue
        }
        look.report(finding, isStuck: isStuck, stops: settings.stallResponse == .abort)
          .deliver(at: look.site)
      }
      for recheck in due.rechecks {
        let cycle = Detector.state.withLock { state in
          state.activeWait(of: recheck.wait.thread) === recheck.wait
            ? state.cycle(closedBy: recheck.wait) : nil
        }
        guard let cycle else {
          Detector.state.withLock { $0.rechecks[ObjectIdentifier(recheck.wait)] = nil }
          continue
        }
        Detector.react(
          to: cycle, closedBy: recheck.wait, onClosingThread: false, baselines: recheck.baselines)
      }
      if let sleep = due.sleep {
        _ = wakeUp.wait(timeout: .now() + .nanoseconds(Int(clamping: sleep)))
      } else {
        wakeUp.wait()
      }
    }
  }
}

/// What the watchdog has to do in one round.
struct DueWork {
  /// A reported subject nobody waits for any more.
  struct Ended {
    let label: CellLabel
    let finished: Bool
    let waitingSince: UInt64
  }

  var looks: [Look] = []
  var rechecks: [Recheck] = []
  var ended: [Ended] = []
  /// How long the watchdog may sleep; `nil`: park until woken.
  var sleep: UInt64?
}

extension DetectorState {
  /// The subjects to look at: those watched, and those that blocked threads wait for.
  func subjectsToWatch() -> [any WaitSubject] {
    var subjects = watched.mapValues(\.subject)
    for wait in waits.values where !wait.isOver {
      guard case .subject(let subject, _) = wait.object, subject.isWatchedForStalls else {
        continue
      }
      subjects[ObjectIdentifier(subject)] = subject
    }
    return Array(subjects.values)
  }

  /// The work due now, given what each watched subject's callers were when read: looks at
  /// subjects whose callers have waited the stall timeout (or whose last look was a timeout
  /// ago), and rechecks of unproven cycles. Reads the clock once, here, under the lock.
  func dueWork(
    _ snapshots: [(any WaitSubject, StallSnapshot?)], settings: DeadlockDetection.Snapshot
  ) -> DueWork {
    let now = Platform.monotonicNanoseconds()
    let timeout = settings.stallTimeoutNanoseconds
    var due = DueWork()
    forgetEndedWaits()
    var nextDeadline: UInt64?
    for (subject, snapshot) in snapshots {
      let key = ObjectIdentifier(subject)
      var watch = watched[key] ?? StallWatch(subject: subject)
      guard settings.stallResponse != .off, let snapshot,
        let oldest = snapshot.callers.map(\.since).min()
      else {
        watched[key] = nil
        if let since = watch.waitingSince {
          due.ended.append(
            .init(label: subject.label, finished: snapshot == nil, waitingSince: since))
        }
        continue
      }
      guard !watch.isEscalated else { continue }
      var next = watch.nextLook ?? oldest &+ timeout
      if next <= now {
        due.looks.append(
          look(at: subject, snapshot, now: now, since: min(oldest, now), timeout: timeout))
        next = now &+ timeout
        watch.nextLook = next
        watched[key] = watch
      }
      nextDeadline = min(nextDeadline ?? next, next)
    }
    for (key, recheck) in rechecks where !recheck.isReported {
      if recheck.wait.isOver {
        rechecks[key] = nil
      } else if recheck.nextLook <= now {
        due.rechecks.append(recheck)
        rechecks[key]!.nextLook = .max
      } else {
        nextDeadline = min(nextDeadline ?? recheck.nextLook, recheck.nextLook)
      }
    }
    if let nextDeadline {
      watchdog.idleRounds = 0
      due.sleep = nextDeadline > now ? nextDeadline - now : 0
    } else {
      watchdog.idleRounds += 1
      if watchdog.idleRounds > Watchdog.idleRoundsBeforeParking && due.rechecks.isEmpty {
        watchdog.isParked = true
      } else {
        due.sleep = timeout
      }
    }
    return due
  }

  /// Takes the watchdog's `finding` into account for the subject it was made for, and says
  /// whether to report it, and whether the thread in the way is stuck: the first look always
  /// reports (not stuck); later ones only when the thread in the way is blocked without
  /// progress (stuck: the report stops the process under `abort`). `nil`: no report, also if
  /// nobody waits any more.
  func record(_ finding: Finding, of look: Look) -> Bool? {
    let key = ObjectIdentifier(look.subject)
    guard var watch = watched[key] else { return nil }
    defer { watched[key] = watch }
    guard watch.isReported else {
      watch.waitingSince = look.since
      watch.baseline = finding.baseline
      return false
    }
    let isStuck =
      finding.activity == .blockedOnLock && finding.baseline != nil
      && finding.baseline == watch.baseline
    watch.baseline = finding.baseline
    watch.isEscalated = isStuck
    return isStuck ? true : nil
  }
}
