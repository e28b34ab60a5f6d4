public import Dispatch

/// Performs a blocking wait that MainOnce's deadlock detector can see.
///
/// Before `wait` runs, MainOnce records that the calling thread waits for `target` and checks
/// the wait-for graph. If `target` already waits, directly or through other threads, for the
/// calling thread (for example a thread blocked in ``onceOnMain(token:file:line:_:)`` while the
/// caller holds the main queue), the wait can never end once the calling thread sleeps in it:
/// MainOnce stops the process with a report then (see ``DeadlockDetection``). Since `wait` may
/// compute before it blocks, or return without blocking, the proof waits, for up to 100 ms on a
/// thread of its own, until `/proc` says the calling thread sleeps in `wait`; `wait` runs
/// meanwhile. A cycle not proven by then is left to the watchdog, which reports the stall. The
/// same check runs, from the other side, when a thread blocks for the main queue while a
/// tracked wait on the main queue waits for it.
///
/// ```swift
/// let indexer = WaitTarget.work("indexer")
/// let finished = DispatchSemaphore(value: 0)
/// DispatchQueue.global().async {
///   indexer.perform { buildIndex() }
///   finished.signal()
/// }
/// withTrackedWait(for: indexer) { finished.wait() }  // as finished.wait(for: indexer) does
/// ```
///
/// The record costs a lock and a walk of the graph; the fast path of a done token is untouched.
///
/// - Parameters:
///   - target: Whom the wait depends on.
///   - file: The caller's file, for reports; leave the default.
///   - line: The caller's line, for reports; leave the default.
///   - wait: The blocking wait itself.
/// - Returns: What `wait` returns.
/// - Throws: What `wait` throws.
public func withTrackedWait<Result, Failure: Error>(
  for target: WaitTarget,
  file: StaticString = #fileID,
  line: UInt = #line,
  _ wait: () throws(Failure) -> Result
) throws(Failure) -> Result {
  try trackingWait(
    for: target, operation: "withTrackedWait(for:)", site: CallSite(file: file, line: line),
    blocksOnEntry: false, wait)
}

extension DispatchSemaphore {
  /// Waits for a signal that `target` will send, as a tracked wait (see
  /// ``withTrackedWait(for:file:line:_:)``). A semaphore that is signalled already returns at
  /// once, without recording anything.
  ///
  /// - Parameters:
  ///   - target: Whom the signal comes from.
  ///   - file: The caller's file, for reports; leave the default.
  ///   - line: The caller's line, for reports; leave the default.
  public func wait(for target: WaitTarget, file: StaticString = #fileID, line: UInt = #line) {
    trackedWait(
      for: target, operation: "DispatchSemaphore.wait(for:)", site: CallSite(file: file, line: line)
    )
  }

  /// Waits at most until `timeout` for a signal that `target` will send, as a tracked wait.
  ///
  /// A wait with a deadline is never part of a proven cycle: it ends by itself. It is recorded
  /// so that a report about a stalled main queue can name it.
  ///
  /// - Parameters:
  ///   - target: Whom the signal comes from.
  ///   - timeout: When to stop waiting.
  ///   - file: The caller's file, for reports; leave the default.
  ///   - line: The caller's line, for reports; leave the default.
  /// - Returns: Whether the semaphore was signalled in time.
  public func wait(
    for target: WaitTarget, timeout: DispatchTime, file: StaticString = #fileID,
    line: UInt = #line
  ) -> DispatchTimeoutResult {
    trackedWait(
      for: target, timeout: timeout, operation: "DispatchSemaphore.wait(for:timeout:)",
      site: CallSite(file: file, line: line))
  }
}

extension DispatchGroup {
  /// Waits until the group's work, done by `target`, has finished, as a tracked wait (see
  /// ``withTrackedWait(for:file:line:_:)``). A group with no work left returns at once, without
  /// recording anything.
  ///
  /// - Parameters:
  ///   - target: Who does the group's work.
  ///   - file: The caller's file, for reports; leave the default.
  ///   - line: The caller's line, for reports; leave the default.
  public func wait(for target: WaitTarget, file: StaticString = #fileID, line: UInt = #line) {
    trackedWait(
      for: target, operation: "DispatchGroup.wait(for:)", site: CallSite(file: file, line: line))
  }

  /// Waits at most until `timeout` for the group's work, done by `target`, as a tracked wait.
  ///
  /// A wait with a deadline is never part of a proven cycle: it ends by itself. It is recorded
  /// so that a report about a stalled main queue can name it.
  ///
  /// - Parameters:
  ///   - target: Who does the group's work.
  ///   - timeout: When to stop waiting.
  ///   - file: The caller's file, for reports; leave the default.
  ///   - line: The caller's line, for reports; leave the default.
  /// - Returns: Whether the work finished in time.
  public func wait(
    for target: WaitTarget, timeout: DispatchTime, file: StaticString = #fileID,
    line: UInt = #line
  ) -> DispatchTimeoutResult {
    trackedWait(
      for: target, timeout: timeout, operation: "DispatchGroup.wait(for:timeout:)",
      site: CallSite(file: file, line: line))
  }
}

/// What the tracked waits of `DispatchSemaphore` and `DispatchGroup` share: both wait with or
/// without a deadline, and can be waited for off the calling thread.
protocol TrackableWait: AnyObject, Sendable {
  func wait()
  func wait(timeout: DispatchTime) -> DispatchTimeoutResult
  /// Calls `done`, from another thread, once ``wait()`` would have returned.
  func notifyAfterWaiting(_ done: @escaping @Sendable () -> Void)
}

extension DispatchSemaphore: TrackableWait {
  func notifyAfterWaiting(_ done: @escaping @Sendable () -> Void) {
    DispatchQueue.global().async {
      self.wait()
      done()
    }
  }
}

extension DispatchGroup: TrackableWait {
  func notifyAfterWaiting(_ done: @escaping @Sendable () -> Void) {
    notify(queue: .global(), execute: done)
  }
}

extension TrackableWait {
  /// A tracked wait without a deadline. Returns at once, recording nothing, if the wait is over
  /// already; serves initializers while it waits under the `service` policy.
  func trackedWait(for target: WaitTarget, operation: StaticString, site: CallSite) {
    if wait(timeout: .now()) == .success { return }
    if let serviced = ServicedWait(for: target, operation: operation, site: site) {
      // The wait happens off this thread, which serves initializers meanwhile.
      return serviced.run(notifyAfterWaiting)
    }
    var isOver = false
    trackingWait(
      for: target, operation: operation, site: site,
      recheck: {
        isOver = self.wait(timeout: .now()) == .success
        return isOver
      }
    ) { if !isOver { wait() } }
  }

  /// A tracked wait with a deadline: recorded for reports, never part of a proven cycle.
  func trackedWait(
    for target: WaitTarget, timeout: DispatchTime, operation: StaticString, site: CallSite
  ) -> DispatchTimeoutResult {
    if wait(timeout: .now()) == .success { return .success }
    return trackingWait(for: target, operation: operation, site: site, hasDeadline: true) {
      wait(timeout: timeout)
    }
  }
}

extension DispatchQueue {
  /// Runs `work` on this serial queue and waits for it, like `sync(execute:)`, as a tracked
  /// wait for ``WaitTarget/queue(_:file:line:)`` of this queue.
  ///
  /// On `DispatchQueue.main` from main context this stops with a report instead of trapping in
  /// libdispatch without a message.
  ///
  /// - Parameters:
  ///   - file: The caller's file, for reports; leave the default.
  ///   - line: The caller's line, for reports; leave the default.
  ///   - work: The work to run on the queue.
  /// - Returns: What `work` returns.
  /// - Throws: What `work` throws.
  public func trackedSync<Result, Failure: Error>(
    file: StaticString = #fileID, line: UInt = #line,
    execute work: () throws(Failure) -> Result
  ) throws(Failure) -> Result {
    let target = WaitTarget.queue(self, file: file, line: line)
    return try trackingWait(
      for: target, operation: "DispatchQueue.trackedSync", site: CallSite(file: file, line: line)
    ) { () throws(Failure) in
      var outcome: Swift.Result<Result, Failure>?
      sync { outcome = Swift.Result { () throws(Failure) in try work() } }
      return try outcome!.get()
    }
  }
}

/// Registers a blocking wait for the deadlock detector around `wait`.
///
/// A cycle is proven only for a wait that would block with no deadline. `recheck`, if given,
/// tries to finish the wait without blocking; when a cycle is found it is tried once more, so
/// that a signal that arrived meanwhile is not taken for a deadlock (`wait` must then return at
/// once). `blocksOnEntry` says whether `wait` blocks as soon as it starts (see
/// ``BlockedWait/blocksOnEntry``).
func trackingWait<Result, Failure: Error>(
  for target: WaitTarget,
  operation: StaticString,
  site: CallSite,
  hasDeadline: Bool = false,
  blocksOnEntry: Bool = true,
  recheck: (() -> Bool)? = nil,
  _ wait: () throws(Failure) -> Result
) throws(Failure) -> Result {
  let thread = ThreadRecord.current
  let blocked = BlockedWait(
    object: .target(target), operation: operation, site: site,
    holdsMainQueue: MainContext.isCurrent(on: thread), hasDeadline: hasDeadline,
    blocksOnEntry: blocksOnEntry)
  if Servicing.applies(holdingMainQueue: blocked.holdsMainQueue) {
    Servicing.serve(blocked, on: thread)
  }
  let previous = DeadlockDetection.beginWait(blocked, on: thread.id, recheck: recheck)
  defer { DeadlockDetection.endWait(blocked, on: thread.id, restoring: previous) }
  return try wait()
}

/// A tracked wait without a deadline, by main-queue code under the `service` policy: it serves
/// initializers while it waits (see ``Servicing``). `nil` where the policy does not apply.
struct ServicedWait {
  private let blocked: BlockedWait
  private let thread: ThreadRecord

  init?(for target: WaitTarget, operation: StaticString, site: CallSite) {
    let thread = ThreadRecord.current
    guard Servicing.applies(holdingMainQueue: MainContext.isCurrent(on: thread)) else {
      return nil
    }
    self.thread = thread
    blocked = BlockedWait(
      object: .target(target), operation: operation, site: site, holdsMainQueue: true)
  }

  /// Starts the wait with `start`, which calls its argument when the wait is over, and serves
  /// initializers until then.
  func run(_ start: (@escaping @Sendable () -> Void) -> Void) {
    Servicing.wait(blocked, on: thread, start: start)
  }
}
