internal import Synchronization

/// How MainOnce reacts to deadlocks it can prove and to stalls it can only observe.
///
/// MainOnce keeps a wait-for graph of the waits it can see: threads blocked in
/// ``onceOnMain(token:file:line:_:)`` or on a ``MainLazy``, and tracked waits such as
/// ``withTrackedWait(for:file:line:_:)`` and `DispatchSemaphore.wait(for:file:line:)`. Before a
/// thread blocks, MainOnce checks whether the wait would close a cycle (the main queue waits for
/// the caller while the caller waits for the main queue). Only a wait with no deadline counts,
/// and another thread's tracked wait only while `/proc` says the thread sleeps in it (not one it
/// has just been released from), as does a ``withTrackedWait(for:file:line:_:)`` closure that
/// closes a cycle (it may compute before it blocks): such a cycle can never end, and by default
/// MainOnce stops the process with a report that lists every edge.
///
/// Waits MainOnce cannot see, such as a raw `semaphore.wait()` on the main queue, are caught by
/// a watchdog. When the callers of an initializer that runs in main context, in any form
/// (blocked threads, suspended tasks, completion handlers), have waited ``stallTimeout``, it
/// reads what the thread in the way is doing from `/proc/self/task/<tid>` and reports it, once
/// per cell. By default the wait goes on, because a busy or sleeping main queue may still get to
/// it.
///
/// The defaults can be changed in code, or before the process starts with environment
/// variables:
///
/// - `MAINONCE_DEADLOCK=abort|report|service|off` sets both ``cycleResponse`` and
///   ``stallResponse`` (`service` applies to cycles; stalls are then reported).
/// - `MAINONCE_STALL_TIMEOUT=<seconds>` sets ``stallTimeout``: a decimal number from 0.001 to
///   86400.
///
/// A value MainOnce does not understand is ignored with a warning that starts with `MainOnce:`.
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
    /// Do not look: cycles are not checked, and the watchdog does not watch.
    case off
    /// For cycles: main-queue code that blocks in a tracked wait runs, in place, the
    /// initializers its wait depends on, and keeps waiting; a cycle that no initializer can
    /// break is stopped as with ``abort``. For stalls, the same as ``report``. See the article
    /// <doc:FindingDeadlocks>, "Waits that serve initializers".
    case service
  }

  /// What to do when a wait would close a cycle. Defaults to ``Response/abort``: the wait can
  /// never end.
  public static var cycleResponse: Response {
    get { Response(code: cycleResponseCode.load(ordering: .relaxed)) }
    set { cycleResponseCode.store(newValue.code, ordering: .relaxed) }
  }

  /// What to do when an initialization keeps its callers waiting. Defaults to
  /// ``Response/report``.
  ///
  /// With ``Response/abort``, MainOnce stops the process only on evidence that nothing will
  /// change: the thread in the way (holding the main queue, or running the initializer) is
  /// blocked in `futex` and has not run at all for a whole ``stallTimeout`` since the last look,
  /// so no earlier than two timeouts after the wait began. A main queue that is busy, sleeping,
  /// idle in an event loop, or blocked but waking up from time to time is only reported.
  public static var stallResponse: Response {
    get { Response(code: stallResponseCode.load(ordering: .relaxed)) }
    set { stallResponseCode.store(newValue.code, ordering: .relaxed) }
  }

  /// How long callers may wait for an initializer before the watchdog looks, and then how often
  /// it looks again. Defaults to one second.
  ///
  /// It must be from 1 ms to one day: a shorter timeout would report every hop. Setting a value
  /// outside that range stops the process with a `MainOnce:` message; use
  /// ``setStallTimeout(_:file:line:)`` to have the message name your line. A new value takes
  /// effect at once, also for waits in progress.
  public static var stallTimeout: Duration {
    get { .nanoseconds(Int64(stallTimeoutNanoseconds.load(ordering: .relaxed))) }
    set { store(newValue, setAt: nil) }
  }

  /// Sets ``stallTimeout``, stopping the process with a message that names the caller's line if
  /// `timeout` is not from 1 ms to one day.
  ///
  /// - Parameters:
  ///   - timeout: How long callers may wait before the watchdog looks.
  ///   - file: The caller's file, for the misuse message; leave the default.
  ///   - line: The caller's line, for the misuse message; leave the default.
  public static func setStallTimeout(
    _ timeout: Duration, file: StaticString = #fileID, line: UInt = #line
  ) {
    store(timeout, setAt: CallSite(file: file, line: line))
  }

  /// Stores `timeout`, and has the watchdog take it into account at once; stops the process
  /// with a message attributed to `site` if it is not from 1 ms to one day.
  private static func store(_ timeout: Duration, setAt site: CallSite?) {
    guard validStallTimeouts.contains(timeout) else {
      Diagnostics.fail(
        "MainOnce: the stall timeout must be from 1 ms to 1 day, not \(timeout): a shorter one"
          + " would report every hop",
        at: site)
    }
    stallTimeoutNanoseconds.store(timeout.wholeNanoseconds, ordering: .relaxed)
    Watchdog.wake()
  }

  /// Receives every report instead of standard error, for example to route it to a logger.
  /// `nil`, the default, writes reports to standard error. A report whose
  /// ``DeadlockReport/stopsProcess`` is `true` still stops the process after the handler
  /// returns.
  public static var reportHandler: (@Sendable (DeadlockReport) -> Void)? {
    get { handler.withLock { $0 } }
    set { handler.withLock { $0 = newValue } }
  }

  /// The stall timeouts MainOnce accepts: from a millisecond (a shorter one would report every
  /// hop) to a day.
  static let validStallTimeouts: ClosedRange<Duration> = .milliseconds(1) ... .seconds(86_400)

  /// The watchdog's settings in force, read with relaxed loads once per round.
  struct Snapshot {
    let stallResponse: Response
    let stallTimeoutNanoseconds: UInt64

    static var current: Snapshot {
      Snapshot(
        stallResponse: DeadlockDetection.stallResponse,
        stallTimeoutNanoseconds: DeadlockDetection.stallTimeoutNanoseconds.load(ordering: .relaxed)
      )
    }
  }

  private static let cycleResponseCode = Atomic((Settings.deadlockResponse ?? .abort).code)
  private static let stallResponseCode = Atomic(
    (Settings.deadlockResponse.map { $0 == .service ? .report : $0 } ?? .report).code)
  private static let stallTimeoutNanoseconds = Atomic<UInt64>(
    (Settings.stallTimeout ?? .seconds(1)).wholeNanoseconds)
  private static let handler = Locked<(@Sendable (DeadlockReport) -> Void)?>(nil)
}

extension DeadlockDetection.Response {
  fileprivate var code: UInt8 {
    switch self {
    case .abort: 0
    case .report: 1
    case .off: 2
    case .service: 3
    }
  }

  /// Every slow path reads the responses: a switch, not a search of `allCases`.
  fileprivate init(code: UInt8) {
    switch code {
    case 1: self = .report
    case 2: self = .off
    case 3: self = .service
    default: self = .abort
    }
  }
}

extension Duration {
  /// The duration in whole nanoseconds; for a duration from zero to a day.
  fileprivate var wholeNanoseconds: UInt64 {
    UInt64(components.seconds) * 1_000_000_000 + UInt64(components.attoseconds / 1_000_000_000)
  }
}
