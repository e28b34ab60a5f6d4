public import Dispatch
internal import Synchronization

/// Performs a blocking wait that MainOnce's deadlock detector can see.
///
/// Before `wait` runs, MainOnce records that the calling thread waits for `target` and checks
/// the wait-for graph. If `target` already waits, directly or through other threads, for the
/// calling thread (for example a thread blocked in ``onceOnMain(token:file:line:_:)`` while the
/// caller holds the main queue), the wait may never end. MainOnce cannot see inside `wait`: it
/// may compute, sleep for another reason, or return. So it stops the process (see
/// ``DeadlockDetection``) only on evidence that nothing will change: the calling thread sleeps
/// in `futex` and has not run at all for a whole stall timeout, with every other thread on the
/// cycle blocked in its own wait. The watchdog looks for that evidence, so such a stop comes one
/// stall timeout after the cycle formed at the earliest. A semaphore or group wait is proven
/// sooner: use `DispatchSemaphore.wait(for:)` or `DispatchGroup.wait(for:)` where you can.
///
/// ```swift
/// func rebuildIndex() {
///   let indexer = WaitTarget.work("indexer")
///   let finished = DispatchSemaphore(value: 0)
///   DispatchQueue.global().async {
///     indexer.perform { buildIndex() }
///     finished.signal()
///   }
///   withTrackedWait(for: indexer) { finished.wait() }  // as finished.wait(for: indexer) does
/// }
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
    evidence: .opaque
  ) { (recorded) throws(Failure) in try recorded.blocking(wait) }
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
/// without a deadline.
protocol TrackableWait: AnyObject, Sendable {
  func wait()
  func wait(timeout: DispatchTime) -> DispatchTimeoutResult
}

extension DispatchSemaphore: TrackableWait {}
extension DispatchGroup: TrackableWait {}

extension TrackableWait {
  /// A tracked wait without a deadline. Returns at once, recording nothing, if the wait is over
  /// already; serves initializers while it waits under the `service` policy.
  func trackedWait(for target: WaitTarget, operation: StaticString, site: CallSite) {
    if wait(timeout: .now()) == .success { return }
    let thread = ThreadRecord.current
    if Servicing.applies(holdingMainQueue: MainContext.isCurrent(on: thread)) {
      // The wait happens on a thread of MainOnce's own; this one serves initializers meanwhile.
      return Servicing.wait(for: target, operation: operation, site: site, on: thread) { done in
        self.wait()
        done()
      }
    }
    var isOver = false
    trackingWait(
      for: target, operation: operation, site: site, evidence: .sleepsInWait,
      recheck: {
        isOver = self.wait(timeout: .now()) == .success
        return isOver
      }
    ) { recorded in if !isOver { recorded.blocking { wait() } } }
  }

  /// A tracked wait with a deadline: recorded for reports, never part of a proven cycle.
  func trackedWait(
    for target: WaitTarget, timeout: DispatchTime, operation: StaticString, site: CallSite
  ) -> DispatchTimeoutResult {
    if wait(timeout: .now()) == .success { return .success }
    return trackingWait(
      for: target, operation: operation, site: site, hasDeadline: true, evidence: .sleepsInWait
    ) { recorded in recorded.blocking { wait(timeout: timeout) } }
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
    let site = CallSite(file: file, line: line)
    QueueOwnership.stopIfSyncWouldWaitForItself(on: self, at: site)
    let target = WaitTarget.queue(self, file: file, line: line)
    return try trackingWait(
      for: target, operation: "DispatchQueue.trackedSync", site: site, evidence: .syncOnQueue
    ) { (recorded) throws(Failure) in
      var outcome: Swift.Result<Result, Failure>?
      recorded.blocking {
        sync {
          recorded.entered.store(true, ordering: .releasing)
          outcome = Swift.Result { () throws(Failure) in try work() }
        }
      }
      return try outcome!.get()
    }
  }
}

/// Records a blocking wait for the deadlock detector around `wait`, which it passes the record.
///
/// A cycle is proven only for a wait that would block with no deadline, on the evidence
/// `evidence` names. `recheck`, if given, tries to finish the wait without blocking; when a
/// cycle is proven it is tried once more, so that a signal that arrived meanwhile is not taken
/// for a deadlock (`wait` must then return at once). Under the `service` policy, main-queue code
/// first runs the initializers its wait depends on.
func trackingWait<Result, Failure: Error>(
  for target: WaitTarget,
  operation: StaticString,
  site: CallSite,
  hasDeadline: Bool = false,
  evidence: RecordedWait.Evidence,
  recheck: (() -> Bool)? = nil,
  _ wait: (RecordedWait) throws(Failure) -> Result
) throws(Failure) -> Result {
  let thread = ThreadRecord.current
  let recorded = RecordedWait(
    on: thread.id, object: .target(target), operation: operation, site: site,
    holdsMainQueue: MainContext.isCurrent(on: thread), hasDeadline: hasDeadline,
    evidence: evidence)
  if Servicing.applies(holdingMainQueue: recorded.holdsMainQueue) {
    Servicing.serve(recorded, on: thread)
  }
  Detector.begin(recorded, recheck: recheck)
  defer { Detector.end(recorded) }
  return try wait(recorded)
}
