internal import Synchronization

/// The deadlock detector's state, under a lock of its own: the wait-for graph, the units of
/// work being performed, the subjects the watchdog watches, and the cycles it looks at again.
/// A class: the graph's walks pass it around without copying its tables.
final class DetectorState {
  // Only touched under `Detector.state`'s lock (or, for a test's own graph, by one thread),
  // which makes every access exclusive: the variables skip the dynamic check.
  /// What each blocked thread waits for (the innermost of its nested waits). The watchdog also
  /// finds here the cells that blocked threads wait for.
  @exclusivity(unchecked) var waits = ThreadTable<RecordedWait>()
  /// Threads performing each unit of work a tracked wait can name.
  @exclusivity(unchecked) var performers: [WaitTarget.WorkID: [ThreadID: Int]] = [:]
  /// The subjects the watchdog watches, by identity: those that callers that do not block wait
  /// for, and those it has looked at. (Those of blocked threads it finds in ``waits``.)
  @exclusivity(unchecked) var watched: [ObjectIdentifier: StallWatch] = [:] {
    didSet { if isShared { Detector.watchedCount.store(watched.count, ordering: .relaxed) } }
  }
  /// Waits that close a cycle not proven yet, by identity: the watchdog looks at them again.
  @exclusivity(unchecked) var rechecks: [ObjectIdentifier: Recheck] = [:]
  /// The watchdog thread's bookkeeping.
  @exclusivity(unchecked) var watchdog = WatchdogState()
  /// Whether this is the process's detector, whose watched count ``Detector/watchedCount``
  /// mirrors (a test's graph is not).
  private let isShared: Bool

  init(isShared: Bool = false) {
    self.isShared = isShared
  }
}

/// A wait that closed a cycle not proven yet, as the watchdog looks at it again.
struct Recheck {
  let wait: RecordedWait
  /// When to look next, and how long the wait after that is: doubling from a millisecond up
  /// to the stall timeout.
  var nextLook: UInt64
  var interval: UInt64
  /// For waits whose evidence is no progress at all (`withTrackedWait`): how much each thread on
  /// the cycle had run at a first reading, and when.
  var baselines: [ThreadID: (progress: ThreadProgress, at: UInt64)] = [:]
  /// Set once the cycle was reported without stopping: it is not reported again.
  var isReported = false
}

enum Detector {
  static let state = Locked(DetectorState(isShared: true))

  /// How many subjects ``DetectorState/watched`` holds, read without the lock: while none is
  /// watched, a subject that changes has nothing to tell the watchdog.
  static let watchedCount = Atomic(0)

  /// Records `wait` and reacts to the cycle it closes, if any (unless cycles are not checked:
  /// then the watchdog still finds the wait). `recheck` tries to end the wait without blocking:
  /// a proven cycle is not reported if it succeeds.
  static func begin(_ wait: RecordedWait, recheck: (() -> Bool)? = nil) {
    let checksCycles = DeadlockDetection.cycleResponse != .off
    let (candidate, startWatchdog) = state.withLock { state -> ([CycleEdge]?, Bool) in
      wait.previous = state.activeWait(of: wait.thread)
      state.waits[wait.thread] = wait
      let start = DeadlockDetection.stallResponse != .off && state.watchdog.needsStart()
      return (checksCycles ? state.cycle(closedBy: wait) : nil, start)
    }
    if startWatchdog { Watchdog.start() }
    if let candidate {
      react(to: candidate, closedBy: wait, onClosingThread: true, recheck: recheck)
    }
  }

  /// Ends `wait`: one atomic store, no lock, so that callers woken together do not queue up for
  /// the detector's lock. From then on the graph skips it (to the wait it was nested in, if
  /// any); the thread's next wait replaces it, and the watchdog drops what is left.
  static func end(_ wait: RecordedWait) {
    wait.ended.store(true, ordering: .releasing)
  }

  /// Watches `subject` for stalls.
  static func watch(_ subject: some WaitSubject) {
    if state.withLock({ $0.watch(subject) }) { Watchdog.start() }
  }

  /// `subject` may have lost its waiting callers, or finished: once nothing is in its way, the
  /// watchdog stops watching it, and says so if it reported it.
  static func subjectChanged(_ subject: some WaitSubject) {
    guard watchedCount.load(ordering: .relaxed) > 0 else { return }
    let key = ObjectIdentifier(subject)
    guard state.withLock({ $0.watched[key] != nil }), subject.obstacle() == .nothing else { return }
    let finished = subject.stallSnapshot() == nil
    let waitingSince = state.withLock { state -> UInt64? in
      state.watched.removeValue(forKey: key)?.waitingSince
    }
    guard let waitingSince else { return }
    DeadlockReport.stallEnded(of: subject.label, finished: finished, waitingSince: waitingSince)
      .deliver(at: nil)
  }

  /// Reacts to a cycle that `wait` closes, as ``DeadlockDetection/cycleResponse`` says: a proven
  /// cycle is reported (and stops the process, but under `report`); under `service`, a
  /// main-queue wait on the cycle that serves initializers is woken instead, proof or not
  /// (waking it is harmless). A cycle not proven yet is looked at again by the watchdog.
  static func react(
    to cycle: [CycleEdge], closedBy wait: RecordedWait, onClosingThread: Bool,
    recheck: (() -> Bool)? = nil,
    baselines: [ThreadID: (progress: ThreadProgress, at: UInt64)] = [:]
  ) {
    let response = DeadlockDetection.cycleResponse
    if response == .off { return }
    if response == .service, let desk = serviceDesk(on: cycle) { return desk.wake() }
    var pending = Recheck(wait: wait, nextLook: 0, interval: 0, baselines: baselines)
    switch Evidence.settle(
      cycle, closedBy: wait, onClosingThread: onClosingThread, baselines: &pending.baselines)
    {
    case .proven(let proven):
      if recheck?() == true { return }
      let report = DeadlockReport.cycle(proven, response: response)
      if !report.stopsProcess {
        guard state.withLock({ $0.markReported(wait) }) else { return }
      }
      report.deliver(at: wait.site)
    case .unsettled:
      scheduleRecheck(pending)
    case .gone:
      return
    }
  }

  /// A wait that serves initializers on `cycle`, if the cycle also runs through an initializer
  /// it can run: one that waits for the main queue.
  static func serviceDesk(on cycle: [CycleEdge]) -> ServiceDesk? {
    guard let desk = cycle.lazy.compactMap(\.wait.desk).first else { return nil }
    let hasServiceableSubject = cycle.contains {
      if case .subject(let subject, _) = $0.wait.object {
        subject.obstacle() == .mainQueue
      } else {
        false
      }
    }
    return hasServiceableSubject ? desk : nil
  }

  private static func scheduleRecheck(_ recheck: Recheck) {
    var recheck = recheck
    let wake = state.withLock { state -> Bool in
      let key = ObjectIdentifier(recheck.wait)
      if let existing = state.rechecks[key] {
        recheck.isReported = existing.isReported
        recheck.interval = existing.interval
      }
      let now = Platform.monotonicNanoseconds()
      let timeout = DeadlockDetection.Snapshot.current.stallTimeoutNanoseconds
      recheck.interval = min(max(1_000_000, recheck.interval * 2), timeout)
      recheck.nextLook = now + recheck.interval
      state.rechecks[key] = recheck
      return state.watchdog.needsStart()
    }
    if wake { Watchdog.start() }
    Watchdog.wake()
  }
}

extension DetectorState {
  /// What `thread` waits for now: its innermost recorded wait that is not over.
  func activeWait(of thread: ThreadID) -> RecordedWait? {
    var wait = waits[thread]
    while let ended = wait, ended.isOver { wait = ended.previous }
    return wait
  }

  /// What each thread waits for now: ``activeWait(of:)`` of every thread with a recorded wait.
  var activeWaits: some Sequence<RecordedWait> {
    waits.lazy.compactMap { self.activeWait(of: $0.key) }
  }

  /// Drops the waits that are over.
  func forgetEndedWaits() {
    for (thread, wait) in waits where wait.isOver {
      waits[thread] = activeWait(of: thread)
    }
  }

  /// Watches `subject`; `true` if the watchdog thread must be started.
  func watch(_ subject: some WaitSubject) -> Bool {
    guard subject.isWatchedForStalls, DeadlockDetection.stallResponse != .off else { return false }
    let key = ObjectIdentifier(subject)
    if watched[key] == nil { watched[key] = StallWatch(subject: subject) }
    return watchdog.needsStart()
  }

  /// Marks the cycle `wait` closes as reported; `false` if it already was.
  func markReported(_ wait: RecordedWait) -> Bool {
    let key = ObjectIdentifier(wait)
    if rechecks[key]?.isReported == true { return false }
    if rechecks[key] == nil { rechecks[key] = Recheck(wait: wait, nextLook: .max, interval: 0) }
    rechecks[key]!.isReported = true
    return true
  }

  func beginPerforming(_ work: WaitTarget.WorkID, on thread: ThreadID) {
    performers[work, default: [:]][thread, default: 0] += 1
  }

  func endPerforming(_ work: WaitTarget.WorkID, on thread: ThreadID) {
    performers[work]?[thread]? -= 1
    if performers[work]?[thread] == 0 { performers[work]?[thread] = nil }
    if performers[work]?.isEmpty == true { performers[work] = nil }
  }
}
