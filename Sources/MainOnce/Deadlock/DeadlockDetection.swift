// Deadlock detection: the wait-for graph, the proofs that stop a process, stalls and what the
// thread in the way is doing. This room owns the public settings (this file), the detector that a
// wait which outlived its grace calls (`Detector.swift`), the graph (`WaitGraph.swift`), the
// findings (`DeadlockReport+Findings.swift`), stalls and `/proc` samples (`Stall.swift`,
// `ThreadSampler.swift`, `MainRunLoop.swift`) and the read-only views it takes of a wait
// (`BlockingWait.swift`). It reads the engine only through `Engine/WaitBoard.swift` and those
// views, and never drives it; it calls `Platform/` and `Reporting/`, and reads whether
// `MainQueueDriver` is in use.
internal import Synchronization

/// How MainOnce reacts to deadlocks it can prove and to stalls it can only observe.
///
/// Threads publish the waits MainOnce performs for them: blocked callers of
/// ``onceOnMain(token:file:line:_:)``, of a ``MainLazy``, of `onceOnMain(for:)` and
/// `runOnce(for:)`, and the tracked waits (`DispatchSemaphore.wait(for:)`,
/// `DispatchGroup.wait(for:)`, `DispatchQueue.trackedSync`, ``withTrackedWait(for:file:line:_:)``).
/// Publishing is a store; a wait that ends within its grace (50 ms) runs none of the detector's
/// code, and MainOnce keeps no thread of its own. A wait that outlives its grace looks, on its
/// own thread, at the wait-for graph: at once, then every 25 ms while a deadlock is suspected,
/// and otherwise at doubling intervals up to 400 ms:
///
/// - **A deadlock is stopped only on a structural proof**: every wait on it is one MainOnce
///   performs without a deadline, each blocker is known for certain (a once-cell's runner, the
///   main queue's holder read from libdispatch, a serial queue's owner, a thread the waiter
///   named, every performer of a unit of work), and each wait shows it is blocked: a once-cell
///   caller until it is resolved, `trackedSync` until its work starts, a semaphore or group wait
///   by a wait slice that began after the deadlock was seen and timed out. Such a deadlock is
///   stopped (``cycleResponse``) within about 100 ms of forming, whichever thread closes it,
///   with a report that lists every wait. `/proc` plays no part.
/// - **A deadlock through a wait MainOnce cannot see into** (a
///   ``withTrackedWait(for:file:line:_:)`` closure, a wait with a deadline) is reported once
///   ("MainOnce: possible deadlock"), and waiting goes on.
/// - **A stall**: once the callers of an initializer that runs in main context, in any form
///   (blocked threads, suspended tasks, completion handlers), have waited ``stallTimeout``, it is
///   reported once, with what the thread in the way is doing, read from `/proc/self/task/<tid>`
///   where it can be. By default the wait goes on; see ``stallResponse``.
///
/// The defaults can be changed in code, or before the process starts with environment
/// variables:
///
/// - `MAINONCE_DEADLOCK=abort|report|service|off` sets both ``cycleResponse`` and
///   ``stallResponse`` (`service` applies to cycles; stalls are then reported).
/// - `MAINONCE_STALL_TIMEOUT=<seconds>` sets ``stallTimeout``: a decimal number from 0.001 to
///   86400.
/// - `MAINONCE_PROC=off` makes MainOnce read nothing from `/proc`, as where it is not readable.
///
/// A value MainOnce does not understand is ignored with a warning that starts with `MainOnce:`.
/// Settings made in code replace those from the environment, and apply to waits in progress
/// within 100 ms. Nothing here is on the fast path of a done token.
public enum DeadlockDetection {
  /// What to do with a finding.
  public enum Response: String, Sendable, CaseIterable {
    /// Stop the process with `fatalError`, whose message is the report (a report handler
    /// receives it first).
    case abort
    /// Deliver the report and go on waiting.
    case report
    /// Do not look: neither cycles nor stalls are looked for.
    case off
    /// For cycles: main-queue code that blocks in `DispatchSemaphore.wait(for:)` or
    /// `DispatchGroup.wait(for:)` runs, in place, every initializer queued for the main queue,
    /// while it waits, and keeps waiting; a deadlock that serving cannot break is stopped as with
    /// ``abort``. For stalls, the same as ``report``. See the article <doc:FindingDeadlocks>,
    /// "Waits that serve initializers".
    case service
  }

  /// What to do with a proven deadlock. Defaults to ``Response/abort``: its waits can never
  /// end.
  public static var cycleResponse: Response {
    get { Response(code: cycleResponseCode.load(ordering: .relaxed)) }
    set { cycleResponseCode.store(newValue.code, ordering: .relaxed) }
  }

  /// What to do when an initialization keeps its callers waiting. Defaults to
  /// ``Response/report``.
  ///
  /// With ``Response/abort``, you opt in to a stop on evidence short of a proof: the thread in
  /// the way (holding the main queue, or running the initializer) is blocked in `futex` and has
  /// not run at all for a whole ``stallTimeout`` since the first report, as `/proc` shows, so no
  /// earlier than two timeouts after the wait began. A main queue that is busy, sleeping, idle
  /// in an event loop, or blocked but waking up from time to time is only reported; where
  /// `/proc` cannot be read, the report says so, and the process goes on.
  public static var stallResponse: Response {
    get { Response(code: stallResponseCode.load(ordering: .relaxed)) }
    set { stallResponseCode.store(newValue.code, ordering: .relaxed) }
  }

  /// How long callers may wait for an initializer before their stall is reported, and then how
  /// often it is looked at again. Defaults to one second, or `MAINONCE_STALL_TIMEOUT`.
  ///
  /// Change it with ``setStallTimeout(_:file:line:)``. A relaxed load: a new value applies to
  /// waits in progress within 100 ms, and every report quotes the timeout it used.
  public static var stallTimeout: Duration {
    .nanoseconds(Int64(stallTimeoutNanoseconds.load(ordering: .relaxed)))
  }

  /// Sets ``stallTimeout``, for the whole process.
  ///
  /// ```swift
  /// DeadlockDetection.setStallTimeout(.milliseconds(250))  // a test suite that wants it sooner
  /// ```
  ///
  /// The timeout must be from 1 ms to one day: a shorter one would report every hop. Any other
  /// value stops the process with a `MainOnce:` message that names the caller's line. A new value
  /// applies to waits in progress within 100 ms (25 ms for a blocked caller; for a wait younger
  /// than the grace, once it is 50 ms old).
  ///
  /// - Parameters:
  ///   - timeout: How long callers may wait before their stall is reported.
  ///   - file: The caller's file, for the misuse message; leave the default.
  ///   - line: The caller's line, for the misuse message; leave the default.
  public static func setStallTimeout(
    _ timeout: Duration, file: StaticString = #fileID, line: UInt = #line
  ) {
    store(timeout, setAt: CallSite(file: file, line: line))
  }

  /// Stores `timeout`, which every watched wait reads at its next look; stops the process
  /// with a message attributed to `site` if it is not from 1 ms to one day.
  private static func store(_ timeout: Duration, setAt site: CallSite) {
    guard validStallTimeouts.contains(timeout) else {
      Diagnostics.fail(
        "MainOnce: the stall timeout must be from 1 ms to 1 day, not \(timeout): a shorter one"
          + " would report every hop",
        at: site)
    }
    stallTimeoutNanoseconds.store(timeout.wholeNanoseconds, ordering: .relaxed)
  }

  /// Receives every report instead of standard error, for example to route it to a logger:
  /// deadlocks, stalls, and MainOnce's warnings (``DeadlockReport/Kind/warning``). `nil`, the
  /// default, writes reports to standard error. A report whose
  /// ``DeadlockReport/stopsProcess`` is `true` still stops the process after the handler
  /// returns. Set it before MainOnce's first use: a warning given earlier has gone to standard
  /// error.
  public static var reportHandler: (@Sendable (DeadlockReport) -> Void)? {
    get { handler.withLock { $0 } }
    set { handler.withLock { $0 = newValue } }
  }

  /// The stall timeouts MainOnce accepts: from a millisecond (a shorter one would report every
  /// hop) to a day.
  static let validStallTimeouts: ClosedRange<Duration> = .milliseconds(1) ... .seconds(86_400)

  /// The settings in force, read with relaxed loads once per look.
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
