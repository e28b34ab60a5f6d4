internal import Synchronization

/// How MainOnce reacts to deadlocks it can prove and to stalls it can only observe.
///
/// MainOnce keeps a wait-for graph of the waits it can see: threads blocked in
/// ``onceOnMain(token:file:line:_:)`` or on a ``MainLazy``, and tracked waits such as
/// ``withTrackedWait(for:file:line:_:)`` and `DispatchSemaphore.wait(for:file:line:)`. Before a
/// thread blocks, MainOnce checks whether the wait would close a cycle (the main queue waits for
/// the caller while the caller waits for the main queue). Such a wait can never end: by default
/// MainOnce stops the process with a report that lists every edge.
///
/// Waits MainOnce cannot see, such as a raw `semaphore.wait()` on the main queue, are caught by
/// a watchdog: when a caller's wait for the main queue has not ended within ``stallTimeout``,
/// it reads what the thread holding the main queue is doing from `/proc/self/task/<tid>` and
/// reports it. By default that report is printed and the wait goes on, because a busy or
/// sleeping main queue may still get to it.
///
/// The defaults can be changed in code, or before the process starts with environment
/// variables:
///
/// - `MAINONCE_DEADLOCK=abort|report|off` sets both ``cycleResponse`` and ``stallResponse``.
/// - `MAINONCE_STALL_TIMEOUT=<seconds>` sets ``stallTimeout`` (at least 0.001).
///
/// Settings made in code replace those from the environment. Nothing here is on the fast path
/// of a done token.
public enum DeadlockDetection {
  /// What to do with a finding.
  public enum Response: String, Sendable, CaseIterable {
    /// Stop the process with `fatalError`, whose message is the report (a report handler
    /// receives it first).
    case abort
    /// Deliver the report and go on waiting.
    case report
    /// Do not look. Cycles are not checked; the watchdog does not run.
    case off
  }

  /// What to do when a wait would close a cycle. Defaults to ``Response/abort``: the wait can
  /// never end.
  public static var cycleResponse: Response {
    get { Response(code: cycleResponseCode.load(ordering: .relaxed)) }
    set { cycleResponseCode.store(newValue.code, ordering: .relaxed) }
  }

  /// What to do when a wait for the main queue stalls. Defaults to ``Response/report``. With
  /// ``Response/abort``, MainOnce stops the process only when the thread holding the main queue,
  /// or the thread running the initializer, is blocked on a lock or semaphore (in `futex`); a
  /// main queue that is busy, sleeping or idle in an event loop is only reported. A wait that
  /// goes on is sampled again every ``stallTimeout``, so a main queue that blocks later is
  /// still caught.
  public static var stallResponse: Response {
    get { Response(code: stallResponseCode.load(ordering: .relaxed)) }
    set { stallResponseCode.store(newValue.code, ordering: .relaxed) }
  }

  /// How long a wait for the main queue may last before the watchdog looks at the main queue.
  /// Defaults to one second; set it with ``setStallTimeout(_:file:line:)``.
  public static var stallTimeout: Duration {
    .nanoseconds(stallTimeoutNanoseconds.load(ordering: .relaxed))
  }

  /// Sets ``stallTimeout``. It must be at least a millisecond: a shorter timeout would report
  /// every hop.
  ///
  /// A method rather than a setter, so that a misuse message can name the caller's line.
  ///
  /// - Parameters:
  ///   - timeout: How long a wait may last before the watchdog looks.
  ///   - file: The caller's file, for the misuse message; leave the default.
  ///   - line: The caller's line, for the misuse message; leave the default.
  public static func setStallTimeout(
    _ timeout: Duration, file: StaticString = #fileID, line: UInt = #line
  ) {
    guard validStallTimeouts.contains(timeout) else {
      Diagnostics.fail(
        "MainOnce: the stall timeout must be from 1 ms to 1 day, not \(timeout): a shorter one"
          + " would report every hop",
        at: CallSite(file: file, line: line))
    }
    stallTimeoutNanoseconds.store(timeout.nanoseconds, ordering: .relaxed)
  }

  /// Receives every report instead of standard error, for example to route it to a logger.
  /// `nil`, the default, writes reports to standard error. A report whose
  /// ``DeadlockReport/stopsProcess`` is `true` still stops the process after the handler
  /// returns.
  public static var reportHandler: (@Sendable (DeadlockReport) -> Void)? {
    get { handler.withLock { $0 } }
    set { handler.withLock { $0 = newValue } }
  }

  /// The settings in force, read with relaxed loads on the slow paths that need them.
  struct Snapshot {
    let cycleResponse: Response
    let stallResponse: Response
    let stallTimeoutNanoseconds: UInt64

    static var current: Snapshot {
      Snapshot(
        cycleResponse: DeadlockDetection.cycleResponse,
        stallResponse: DeadlockDetection.stallResponse,
        stallTimeoutNanoseconds: UInt64(
          DeadlockDetection.stallTimeoutNanoseconds.load(ordering: .relaxed)))
    }
  }

  /// The stall timeouts MainOnce accepts: from a millisecond (a shorter one would report every
  /// hop) to a day.
  static let validStallTimeouts: ClosedRange<Duration> = .milliseconds(1) ... .seconds(86_400)

  /// The defaults, adjusted by `MAINONCE_DEADLOCK` and `MAINONCE_STALL_TIMEOUT`.
  private static let environment: (cycle: Response, stall: Response, timeout: Duration) = (
    cycle: Settings.deadlockResponse ?? .abort, stall: Settings.deadlockResponse ?? .report,
    timeout: Settings.stallTimeout ?? .seconds(1)
  )

  private static let cycleResponseCode = Atomic(environment.cycle.code)
  private static let stallResponseCode = Atomic(environment.stall.code)
  fileprivate static let stallTimeoutNanoseconds = Atomic(environment.timeout.nanoseconds)
  private static let handler = Locked<(@Sendable (DeadlockReport) -> Void)?>(nil)

  /// Starts a tracked wait: checks for a cycle, records the wait, and reacts to a cycle.
  /// Returns the wait it replaces on this thread, for ``endWait(on:restoring:)``.
  static func beginWait(_ wait: BlockedWait, on thread: ThreadID) -> BlockedWait? {
    let response = cycleResponse
    let (previous, cycle) = Registry.shared.withLock { registry in
      let (previous, cycle) = registry.beginWait(
        wait, on: thread, checkingCycles: response != .off)
      return (
        previous,
        cycle.map { DeadlockReport.cycle($0, stops: response == .abort) }
      )
    }
    cycle?.deliver(at: wait.site)
    return previous
  }

  /// Ends a wait, putting back the one it replaced.
  static func endWait(on thread: ThreadID, restoring previous: BlockedWait?) {
    let ended = Registry.shared.withLock { $0.endWait(on: thread, restoring: previous) }
    Watchdog.reportEnd(of: ended, on: thread)
  }
}

extension DeadlockDetection.Response {
  fileprivate var code: UInt8 {
    switch self {
    case .abort: 0
    case .report: 1
    case .off: 2
    }
  }

  fileprivate init(code: UInt8) {
    self = code == 0 ? .abort : code == 1 ? .report : .off
  }
}
