internal import Dispatch

/// The watchdog thread's bookkeeping, kept in the ``Registry``.
struct WatchdogState {
  var isStarted = false
  /// Parked without a timeout, because nothing has been watched for a while.
  var isParked = false
  /// Rounds in a row with nothing to watch.
  var idleRounds = 0
}

/// The watchdog's notes on one flight it has looked at.
struct StallWatch {
  /// A thread in a flight's way, and how much it had run.
  struct Baseline: Equatable {
    let thread: ThreadID
    let progress: ThreadProgress
  }

  /// When it looks next.
  var nextLook: UInt64
  /// The thread in the flight's way at the last look, and how much it had run: what the next
  /// look compares with to tell a thread that is stuck from one that makes progress.
  var baseline: Baseline?
  /// Set once a look has found the thread in the way blocked without progress: the last word
  /// on this flight.
  var isEscalated = false
  /// When the oldest caller started waiting, as of the first report.
  let waitingSince: UInt64
}

/// Reports initializations that keep their callers waiting, explaining what is in the way.
///
/// One thread, started by the first caller that waits for an initializer in main context, in
/// any form: a blocked thread, a suspended task, a kept completion handler. It watches flights,
/// not threads: a cell whose callers have waited the stall timeout is reported once, with every
/// caller listed, then looked at again every stall timeout. It is reported a second time only
/// when the thread in its way is found blocked in `futex` without having run at all since the
/// look before; that is the only finding that stops the process, with ``DeadlockDetection/
/// Response/abort``. When a reported flight ends, the watchdog says so.
///
/// While anything is watched it sleeps until the next look is due; with nothing to watch it
/// sleeps one timeout at a time, and after a minute of that it parks until woken. A waiting
/// caller costs no system call.
enum Watchdog {
  private static let wakeUp = DispatchSemaphore(value: 0)
  static let idleRoundsBeforeParking = 60

  /// Notes a new caller waiting for an initializer in main context. Under the registry lock.
  static func watch(_ registry: inout Registry) {
    if !registry.watchdog.isStarted {
      registry.watchdog.isStarted = true
      startThread()
    } else if registry.watchdog.isParked {
      registry.watchdog.isParked = false
      wakeUp.signal()
    }
  }

  /// Makes the watchdog look again now: a setting has changed.
  static func settingsChanged() {
    if Registry.shared.withLock({ $0.watchdog.isStarted }) { wakeUp.signal() }
  }

  private static func startThread() {
    let status = Platform.startThread { Watchdog.run() }
    if status != 0 {
      Platform.writeToStandardError(
        "MainOnce: cannot start the deadlock watchdog (pthread_create: \(status)); stalls will not be reported\n"
      )
    }
  }

  private static func run() -> Never {
    while true {
      let settings = DeadlockDetection.Snapshot.current
      let now = Platform.monotonicNanoseconds()
      let (looks, sleep) = Registry.shared.withLock { registry in
        registry.dueLooks(now: now, settings: settings)
      }
      for look in looks {
        let finding = look.sample()
        // The report is written outside the lock: explaining it may call into the run loop.
        guard let isStuck = Registry.shared.withLock({ $0.record(finding, of: look) }) else {
          continue
        }
        look.report(finding, isStuck: isStuck, stops: settings.stallResponse == .abort)
          .deliver(at: look.site)
      }
      if let sleep {
        _ = wakeUp.wait(timeout: .now() + .nanoseconds(Int(clamping: sleep)))
      } else {
        wakeUp.wait()
      }
    }
  }
}

extension Registry {
  /// The flights due for a look: their callers have waited the stall timeout, or the last look
  /// was a timeout ago. Schedules their next look, and returns how long the watchdog may sleep
  /// (`nil`: park until woken).
  mutating func dueLooks(now: UInt64, settings: DeadlockDetection.Snapshot) -> ([Look], UInt64?) {
    let timeout = settings.stallTimeoutNanoseconds
    var looks: [Look] = []
    var nextDeadline: UInt64?
    for flight in activeFlights.values where settings.stallResponse != .off {
      guard flight.policy != .callingThread, flight.outcome == nil,
        flight.watch?.isEscalated != true,
        let oldest = flight.queue.lazy.filter(\.isWaiting).map(\.since).min()
      else { continue }
      var due = flight.watch?.nextLook ?? oldest + timeout
      if due <= now {
        looks.append(look(at: flight, now: now, timeout: timeout))
        due = now + timeout
        flight.watch?.nextLook = due
      }
      nextDeadline = min(nextDeadline ?? due, due)
    }
    if let nextDeadline {
      watchdog.idleRounds = 0
      return (looks, nextDeadline - now)
    }
    watchdog.idleRounds += 1
    if watchdog.idleRounds > Watchdog.idleRoundsBeforeParking {
      watchdog.isParked = true
      return (looks, nil)
    }
    return (looks, timeout)
  }

  /// Takes the watchdog's `finding` into account for the flight it was made for, and says
  /// whether to report it, and whether the thread in the way is stuck: the first look always
  /// reports (not stuck); later ones only when the thread in the way is blocked without
  /// progress (stuck: the report stops the process under `abort`). `nil`: no report, also if
  /// the flight has ended meanwhile.
  mutating func record(_ finding: Finding, of look: Look) -> Bool? {
    let flight = look.flight
    guard flight.outcome == nil, flight.queue.contains(where: \.isWaiting) else { return nil }
    guard var watch = flight.watch else {
      flight.watch = StallWatch(
        nextLook: look.now + look.timeout, baseline: finding.baseline, waitingSince: look.since)
      return false
    }
    let isStuck =
      finding.activity == .blockedOnLock && finding.baseline != nil
      && finding.baseline == watch.baseline
    watch.baseline = finding.baseline
    watch.isEscalated = isStuck
    flight.watch = watch
    return isStuck ? true : nil
  }

  /// The watchdog's word that a flight it reported no longer keeps anyone waiting, if it did
  /// report it. Call under the lock where a flight finishes or loses its last waiting caller.
  mutating func endOfStall(_ flight: Flight) -> DeadlockReport? {
    guard let watch = flight.watch,
      flight.outcome != nil || !flight.queue.contains(where: \.isWaiting)
    else { return nil }
    flight.watch = nil
    let waited = formatDuration(Platform.monotonicNanoseconds() - watch.waitingSince)
    return DeadlockReport(
      kind: .stallEnded, stopsProcess: false,
      text: flight.outcome != nil
        ? "MainOnce: the \(flight.label.work) of \(flight.label) finished after \(waited); its"
          + " callers go on"
        : "MainOnce: no caller waits for the \(flight.label.work) of \(flight.label) any more,"
          + " after \(waited)")
  }
}
