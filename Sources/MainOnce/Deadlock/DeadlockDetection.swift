// Deadlock detection: the wait-for graph, the proofs that stop a process, stalls and what the
// thread in the way is doing. This room owns the public settings (this file), the detector, which
// the engine knows only as the observer of its waits and a tracked wait calls once it outlived
// its grace period (`Detector.swift`), the graph (`WaitGraph.swift`), the findings
// (`DeadlockReport+Findings.swift`), stalls and `/proc` samples (`Stall.swift`,
// `ThreadSampler.swift`). It calls `Engine/` only to read it: the waits on
// the board (`Engine/WaitBoard.swift`) and the views of a wait and of a stall subject
// (`Engine/BlockingWait.swift`), whose one write is the claim of a stall report; it never drives
// the engine and performs none of its transitions. It calls `Platform/` (settings, who holds and
// who serves the main queue, where a report goes) and `Reporting/` (what reports say).
internal import Synchronization

/// How MainOnce reacts to deadlocks it can prove and to stalls it can only observe: two
/// settings, one for each.
///
/// Threads publish the waits MainOnce performs for them: blocked callers of
/// ``onceOnMain(token:file:line:_:)``, of a ``MainLazy``, of `onceOnMain(for:)` and
/// `runOnce(for:)`, and the tracked waits (`DispatchSemaphore.wait(for:)`,
/// `DispatchGroup.wait(for:)`, `DispatchQueue.trackedSync`, ``withTrackedWait(for:file:line:_:)``).
/// Publishing is a store; a wait that ends within its grace period (50 ms) runs none of the
/// detector's code, and MainOnce keeps no thread of its own. A wait that outlives its grace period
/// looks, on its own thread, at the wait-for graph: at once, then every 25 ms while a deadlock is
/// suspected, and otherwise at doubling intervals up to 400 ms:
///
/// - **A deadlock is stopped only on a structural proof**: every wait on it is one MainOnce
///   performs without a deadline, each blocker is known for certain and is the only thread
///   that can end the wait (a once-cell's runner, the main queue's holder read from
///   libdispatch, a serial queue's owner, a thread of the program's own that the waiter named;
///   see ``WaitTarget``), and each wait shows it is blocked: a once-cell caller until it is
///   resolved, `trackedSync` until its work starts, a semaphore or group wait by a wait slice
///   that began after the deadlock was seen and timed out. Such a deadlock is handled as
///   ``cycles`` says (stopped, by default) within about 100 ms of forming, whichever thread
///   closes it, with a report that lists every wait. `/proc` plays no part.
/// - **A deadlock through a wait MainOnce cannot see into or whose enders it cannot all name**
///   (a ``withTrackedWait(for:file:line:_:)`` closure, a wait with a deadline, a wait for a
///   ``WaitTarget/work(_:)``) is reported once ("MainOnce: possible deadlock, not stopped"), and
///   waiting goes on.
/// - **A stall**: once the callers of an initializer that runs in main context, in any form
///   (blocked threads, suspended tasks, completion handlers), have waited the stall timeout, it
///   is reported once, with what the thread in the way is doing, read from
///   `/proc/self/task/<tid>` where it can be. By default the wait goes on; see ``stalls``.
///
/// Each setting can be changed in code, or before the process starts with an environment
/// variable of its own:
///
/// - `MAINONCE_DEADLOCK=abort|report|service|off` sets ``cycles``, and nothing else.
/// - `MAINONCE_STALL=report|abort|off` sets the response of ``stalls``, and
///   `MAINONCE_STALL_TIMEOUT=<seconds>` its timeout: a decimal number from 0.001 to 86400.
/// - `MAINONCE_PROC=off` makes MainOnce read nothing from `/proc`, as where it is not readable.
///
/// A value MainOnce does not understand is ignored with a warning that starts with `MainOnce:`.
/// Settings made in code replace those from the environment, and apply to waits in progress
/// within 100 ms. Nothing here is on the fast path of a done token.
public enum DeadlockDetection {
  /// What to do with a deadlock: a cycle of waits.
  public enum CyclePolicy: String, Sendable, CaseIterable {
    /// Stop the process with `fatalError` on a proven deadlock, whose message is the report (a
    /// report handler receives it first). The default: its waits can never end.
    case abort
    /// Deliver the report of a proven deadlock once, and go on waiting.
    case report
    /// Main-queue code that blocks in `DispatchSemaphore.wait(for:)` or
    /// `DispatchGroup.wait(for:)` runs, in place, every initializer queued for the main queue,
    /// while it waits, and keeps waiting; a proven deadlock that serving cannot break is
    /// stopped as with ``abort``. See the article <doc:FindingDeadlocks>, "Waits that serve
    /// initializers".
    case service
    /// Do not look for deadlocks.
    case off
  }

  /// What to do when an initialization keeps its callers waiting, and after how long.
  ///
  /// ```swift
  /// DeadlockDetection.stalls = .report(after: .milliseconds(250))  // a test suite wants it sooner
  /// ```
  ///
  /// A stall is never proven: MainOnce can only describe what the thread in the way is doing.
  /// So stalls are reported by default, and the process stops on one only where you opt in to
  /// ``abort(after:file:line:)``.
  public struct StallPolicy: Sendable, Hashable, CustomStringConvertible {
    /// What to do with a stall.
    public enum Response: String, Sendable, CaseIterable {
      /// Report each stalled initialization once, and again if it is stuck; go on waiting.
      case report
      /// Report, and stop the process on evidence short of a proof: see
      /// ``StallPolicy/abort(after:file:line:)``.
      case abort
      /// Watch no stalls.
      case off
    }

    /// What to do with a stall.
    public let response: Response
    /// How long callers may wait for an initializer before their stall is reported, and then
    /// how often it is looked at again. Every report quotes it.
    public let timeout: Duration

    /// Reports the callers of an initialization once they have waited `timeout`, and goes on
    /// waiting. The default, with a timeout of one second.
    ///
    /// - Parameters:
    ///   - timeout: From 1 ms to one day: a shorter one would report every hop. Any other value
    ///     stops the process with a `MainOnce:` message that names the caller's line.
    ///   - file: The caller's file, for the misuse message; leave the default.
    ///   - line: The caller's line, for the misuse message; leave the default.
    /// - Returns: The policy, to assign to ``DeadlockDetection/stalls``.
    public static func report(
      after timeout: Duration = .seconds(1), file: StaticString = #fileID, line: UInt = #line
    ) -> StallPolicy {
      StallPolicy(.report, timeout, at: CallSite(file: file, line: line))
    }

    /// Reports a stall as ``report(after:file:line:)`` does, and stops the process on evidence
    /// short of a proof: the thread in the way (holding the main queue, or running the
    /// initializer) is blocked in `futex` and has not run at all for a whole `timeout` since the
    /// first report, as `/proc` shows, so no earlier than two timeouts after the wait began. A
    /// main queue that is busy, sleeping, idle in an event loop, or blocked but waking up from
    /// time to time is only reported; where `/proc` cannot be read, the report says so, and the
    /// process goes on.
    ///
    /// - Warning: A main thread blocked in a raw semaphore wait for slow I/O looks the same as
    ///   one blocked for good: opt in where a stop is better than a wait (a CI run, say).
    ///
    /// - Parameters:
    ///   - timeout: From 1 ms to one day; any other value stops the process with a `MainOnce:`
    ///     message that names the caller's line.
    ///   - file: The caller's file, for the misuse message; leave the default.
    ///   - line: The caller's line, for the misuse message; leave the default.
    /// - Returns: The policy, to assign to ``DeadlockDetection/stalls``.
    public static func abort(
      after timeout: Duration = .seconds(1), file: StaticString = #fileID, line: UInt = #line
    ) -> StallPolicy {
      StallPolicy(.abort, timeout, at: CallSite(file: file, line: line))
    }

    /// Watches no stalls.
    public static let off = StallPolicy(response: .off, timeout: .seconds(1))

    /// `report after 1.0 s`, `abort after 250 ms`, `off`.
    public var description: String {
      response == .off ? "off" : "\(response) after \(formatDuration(timeout.wholeNanoseconds))"
    }
  }

  /// What to do with a deadlock. Defaults to ``CyclePolicy/abort``, or `MAINONCE_DEADLOCK`. A
  /// relaxed load and store: a new value applies to waits in progress at their next look.
  public static var cycles: CyclePolicy {
    get { cyclePolicies[Int(cycleCode.load(ordering: .relaxed))] }
    set { cycleCode.store(cyclePolicies.firstIndex(of: newValue)!, ordering: .relaxed) }
  }

  /// What to do when an initialization keeps its callers waiting. Defaults to reporting after
  /// one second, or `MAINONCE_STALL` and `MAINONCE_STALL_TIMEOUT`.
  ///
  /// A new value applies to waits in progress within 100 ms (25 ms for a blocked caller; for a
  /// wait younger than the grace period, once it is 50 ms old).
  public static var stalls: StallPolicy {
    get {
      StallPolicy(
        response: stallResponses[stallCode.load(ordering: .relaxed)],
        timeout: .nanoseconds(Int64(stallTimeoutNanoseconds.load(ordering: .relaxed))))
    }
    set {
      stallTimeoutNanoseconds.store(newValue.timeout.wholeNanoseconds, ordering: .relaxed)
      stallCode.store(stallResponses.firstIndex(of: newValue.response)!, ordering: .relaxed)
    }
  }

  /// Receives every report instead of standard error, for example to route it to a logger:
  /// deadlocks, stalls, and MainOnce's warnings (``DeadlockReport/Kind/warning``). `nil`, the
  /// default, writes reports to standard error. A report whose
  /// ``DeadlockReport/stopsProcess`` is `true` still stops the process after the handler
  /// returns. Set it before MainOnce's first use: a warning given earlier has gone to standard
  /// error.
  public static var reportHandler: (@Sendable (DeadlockReport) -> Void)? {
    get { DeadlockReport.handler.withLock { $0 } }
    set { DeadlockReport.handler.withLock { $0 = newValue } }
  }

  /// The stall settings in force, read with relaxed loads once per look.
  struct Snapshot {
    let stallResponse: StallPolicy.Response
    let stallTimeoutNanoseconds: UInt64

    static var current: Snapshot {
      let stalls = DeadlockDetection.stalls
      return Snapshot(
        stallResponse: stalls.response, stallTimeoutNanoseconds: stalls.timeout.wholeNanoseconds)
    }

    /// How long a report that stops the process waits for the report handler first: the
    /// larger of a second and the stall timeout.
    var handlerPatience: UInt64 { max(1_000_000_000, stallTimeoutNanoseconds) }
  }

  // Each setting is stored as its index in these arrays, made once: reading one allocates
  // nothing.
  private static let cyclePolicies = CyclePolicy.allCases
  private static let stallResponses = StallPolicy.Response.allCases
  private static let cycleCode = Atomic(
    cyclePolicies.firstIndex(of: Settings.cycles.flatMap(CyclePolicy.init) ?? .abort)!)
  private static let stallCode = Atomic(
    stallResponses.firstIndex(
      of: Settings.stallResponse.flatMap(StallPolicy.Response.init) ?? .report)!)
  private static let stallTimeoutNanoseconds = Atomic<UInt64>(
    (Settings.stallTimeout ?? .seconds(1)).wholeNanoseconds)
}

extension DeadlockDetection.StallPolicy {
  // In an extension, so that the policy keeps its memberwise initializer.
  fileprivate init(_ response: Response, _ timeout: Duration, at site: CallSite) {
    guard Settings.validStallTimeouts.contains(timeout) else {
      Diagnostics.fail(
        "MainOnce: the stall timeout must be from 1 ms to 1 day, not \(timeout): a shorter one"
          + " would report every hop",
        at: site)
    }
    self.init(response: response, timeout: timeout)
  }
}

extension Duration {
  /// The duration in whole nanoseconds; for a duration from zero to a day.
  fileprivate var wholeNanoseconds: UInt64 {
    UInt64(components.seconds) * 1_000_000_000 + UInt64(components.attoseconds / 1_000_000_000)
  }
}
