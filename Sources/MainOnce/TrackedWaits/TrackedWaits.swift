// Tracked waits: blocking waits of the user's own (semaphores, groups, `trackedSync`, a closure)
// that the deadlock detector can see. This room owns them (this file) and the targets they wait
// for (`WaitTarget.swift`). It calls `Engine/` (it publishes its waits on the board and shows
// them through the engine's view of a wait, keeps a spare wait in a thread's record, and has the
// engine run queued attempts while a wait in main context serves them), `Deadlock/` (a wait that
// outlived its grace period is watched by the detector, which a `trackedSync` also asks before it
// blocks where the queue's owner waits already; the `service` policy is the detector's setting),
// `Platform/` and `Reporting/`.
public import Dispatch
internal import Synchronization

/// Performs a blocking wait that MainOnce's deadlock detector can see.
///
/// While `wait` runs, MainOnce publishes that the calling thread waits for `target`. If `target`
/// waits, directly or through other threads, for the calling thread (for example a thread
/// blocked in ``onceOnMain(token:file:line:_:)`` while the caller holds the main queue), the
/// wait may never end. MainOnce cannot see inside `wait`: it may compute, sleep for another
/// reason, or return. So such a cycle is **reported, never stopped**: the other threads on it
/// report it ("MainOnce: possible deadlock", one line per wait) once their own waits have
/// outlived their grace period, and waiting goes on. Use `DispatchSemaphore.wait(for:)` or
/// `DispatchGroup.wait(for:)` where you can: a cycle through them is proven and stopped.
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
/// Publishing the wait costs a few stores; nothing else runs unless another wait outlives its
/// grace period. MainOnce cannot interrupt `wait`: under the `service` policy it serves no
/// initializer.
///
/// - Parameters:
///   - target: Whom the wait depends on.
///   - file: The caller's file, for reports; leave the default.
///   - line: The caller's line, for reports; leave the default.
///   - wait: The blocking wait itself.
/// - Returns: What `wait` returns.
/// - Throws: What `wait` throws.
@inlinable
public func withTrackedWait<Result, Failure: Error>(
  for target: WaitTarget,
  file: StaticString = #fileID,
  line: UInt = #line,
  _ wait: () throws(Failure) -> Result
) throws(Failure) -> Result {
  try withUnsafePointer(to: target) { (target) throws(Failure) -> Result in
    let scope = _TrackedScope(opaqueWaitFor: target, file: file, line: line)
    defer { scope.end() }
    return try wait()
  }
}

extension DispatchSemaphore {
  /// Waits for a signal that `target` will send, as a tracked wait.
  ///
  /// A semaphore that is signalled already returns at once: one `dispatch_semaphore_wait` with
  /// a past deadline, no clock read, nothing recorded. A wait that lasts longer than MainOnce's
  /// grace period (50 ms) is published and waits in slices of 25 ms, so that the deadlock detector
  /// can prove it blocked: a cycle through it (the main queue waiting for `target` while `target`
  /// waits for the main queue, say) stops the process with a report, within about 100 ms of
  /// forming. Under the `service` policy, main-queue code runs the initializers queued for the
  /// main queue while it waits.
  ///
  /// - Parameters:
  ///   - target: Whom the signal comes from.
  ///   - file: The caller's file, for reports; leave the default.
  ///   - line: The caller's line, for reports; leave the default.
  @inlinable
  public func wait(for target: WaitTarget, file: StaticString = #fileID, line: UInt = #line) {
    if _fastPath(_isOver(wait(timeout: _pastDeadline))) { return }
    _ = _trackedWait(
      for: target, deadline: nil, operation: "DispatchSemaphore.wait(for:)", file: file,
      line: line)
  }

  /// Waits at most until `timeout` for a signal that `target` will send, as a tracked wait.
  ///
  /// A wait with a deadline ends by itself: a cycle through it is reported, never stopped.
  ///
  /// - Parameters:
  ///   - target: Whom the signal comes from.
  ///   - timeout: When to stop waiting.
  ///   - file: The caller's file, for reports; leave the default.
  ///   - line: The caller's line, for reports; leave the default.
  /// - Returns: Whether the semaphore was signalled in time.
  @inlinable
  public func wait(
    for target: WaitTarget, timeout: DispatchTime, file: StaticString = #fileID,
    line: UInt = #line
  ) -> DispatchTimeoutResult {
    if _fastPath(_isOver(wait(timeout: _pastDeadline))) { return .success }
    return _trackedWait(
      for: target, deadline: timeout, operation: "DispatchSemaphore.wait(for:timeout:)",
      file: file, line: line)
  }
}

extension DispatchGroup {
  /// Waits until the group's work, done by `target`, has finished, as a tracked wait (see
  /// `DispatchSemaphore.wait(for:file:line:)`). A group with no work left returns at once.
  ///
  /// - Parameters:
  ///   - target: Who does the group's work.
  ///   - file: The caller's file, for reports; leave the default.
  ///   - line: The caller's line, for reports; leave the default.
  @inlinable
  public func wait(for target: WaitTarget, file: StaticString = #fileID, line: UInt = #line) {
    if _fastPath(_isOver(wait(timeout: _pastDeadline))) { return }
    _ = _trackedWait(
      for: target, deadline: nil, operation: "DispatchGroup.wait(for:)", file: file, line: line)
  }

  /// Waits at most until `timeout` for the group's work, done by `target`, as a tracked wait.
  ///
  /// A wait with a deadline ends by itself: a cycle through it is reported, never stopped.
  ///
  /// - Parameters:
  ///   - target: Who does the group's work.
  ///   - timeout: When to stop waiting.
  ///   - file: The caller's file, for reports; leave the default.
  ///   - line: The caller's line, for reports; leave the default.
  /// - Returns: Whether the work finished in time.
  @inlinable
  public func wait(
    for target: WaitTarget, timeout: DispatchTime, file: StaticString = #fileID,
    line: UInt = #line
  ) -> DispatchTimeoutResult {
    if _fastPath(_isOver(wait(timeout: _pastDeadline))) { return .success }
    return _trackedWait(
      for: target, deadline: timeout, operation: "DispatchGroup.wait(for:timeout:)", file: file,
      line: line)
  }
}

/// A deadline long past: the 1st nanosecond of uptime. Built from its bits, as a constant, rather
/// than by `DispatchTime(uptimeNanoseconds:)`, which is a call into the overlay (that returns its
/// argument). This is safe because `DispatchTime`'s one stored property is its public
/// `rawValue: UInt64`, whose value here is what that initializer returns for 1, and
/// `unsafeBitCast` checks the sizes agree.
@inlinable
@inline(__always)
var _pastDeadline: DispatchTime { unsafeBitCast(UInt64(1), to: DispatchTime.self) }

/// Whether a wait with a past deadline found the wait over: a pattern match, which, unlike `==`
/// on `DispatchTimeoutResult`, calls nothing in the Dispatch overlay.
@inlinable
@inline(__always)
func _isOver(_ result: DispatchTimeoutResult) -> Bool {
  if case .success = result { true } else { false }
}

/// What the tracked waits of `DispatchSemaphore` and `DispatchGroup` share.
@usableFromInline
protocol TrackableWait: AnyObject, Sendable {
  func wait(timeout: DispatchTime) -> DispatchTimeoutResult
}

extension TrackableWait {
  /// The slow path of `wait(for:)` and `wait(for:timeout:)`, out of line.
  @usableFromInline
  @inline(never)
  func _trackedWait(
    for target: WaitTarget, deadline: DispatchTime?, operation: StaticString,
    file: StaticString, line: UInt
  ) -> DispatchTimeoutResult {
    trackedWait(
      self, for: target, deadline: deadline, operation: operation,
      site: CallSite(file: file, line: line))
  }
}

extension DispatchSemaphore: TrackableWait {}
extension DispatchGroup: TrackableWait {}

extension TrackableWait {
  /// Waits until `deadline`; serving, if `serves`, the initializers queued for the main queue
  /// every millisecond. Whether the wait ended.
  func wait(until deadline: DispatchTime, serving serves: Bool, on thread: ThreadRecord) -> Bool {
    guard serves else { return wait(timeout: deadline) == .success }
    while true {
      MainQueueEngine.runQueuedAttempts(on: thread)
      let step = min(deadline, .now() + .milliseconds(1))
      if wait(timeout: step) == .success { return true }
      if step == deadline { return false }
    }
  }
}

/// The slow path of a tracked semaphore or group wait: unpublished for the grace period, then
/// published and waiting in slices that the deadlock detector watches.
func trackedWait(
  _ waitable: some TrackableWait, for target: WaitTarget, deadline: DispatchTime?,
  operation: StaticString, site: CallSite
) -> DispatchTimeoutResult {
  let thread = ThreadRecord.current
  let serves = ServicePolicy.applies(on: thread)
  let gracePeriodEnd = DispatchTime.now() + .nanoseconds(Int(WaitBoard.gracePeriod))
  if waitable.wait(
    until: min(gracePeriodEnd, deadline ?? gracePeriodEnd), serving: serves, on: thread)
  {
    return .success
  }
  if let deadline, deadline <= gracePeriodEnd { return .timedOut }
  return withUnsafePointer(to: target) { target in
    watchedWait(
      waitable, for: target, deadline: deadline, operation: operation, site: site, on: thread,
      serving: serves)
  }
}

/// The rest of ``trackedWait(_:for:deadline:operation:site:)``, once the grace period is over: the
/// wait published, in slices the deadlock detector watches.
private func watchedWait(
  _ waitable: some TrackableWait, for target: UnsafePointer<WaitTarget>, deadline: DispatchTime?,
  operation: StaticString, site: CallSite, on thread: ThreadRecord, serving serves: Bool
) -> DispatchTimeoutResult {
  let proof: WaitProof =
    if deadline != nil { .timed } else if let why = target.pointee.openness {
      .open(because: why)
    } else { .slices }
  let scope = _TrackedScope(target, operation: operation, site: site, proof: proof, serves: serves)
  defer { scope.end() }
  let record = scope.record.takeUnretainedValue()
  var result = DispatchTimeoutResult.timedOut
  Detector.waitOutlivedGracePeriod(record) { sliceEnd in
    let end = deadline.map { min($0, sliceEnd) } ?? sliceEnd
    let number = record.startedSlices.load(ordering: .relaxed) &+ 1
    record.startedSlices.store(number, ordering: .sequentiallyConsistent)
    if waitable.wait(until: end, serving: serves, on: thread) {
      result = .success
      return true
    }
    record.timedOutSlice.store(number, ordering: .sequentiallyConsistent)
    return end == deadline
  }
  return result
}

extension DispatchQueue {
  /// Runs `work` on this serial queue and waits for it, like `sync(execute:)`, as a tracked
  /// wait for ``WaitTarget/queue(_:file:line:)`` of this queue.
  ///
  /// The wait is published before the queue's owner is read, without allocating: a cycle
  /// through it (this thread waits for the queue's owner, which waits for this thread) is
  /// stopped by the other threads on it. On `DispatchQueue.main` from main context, or on any
  /// queue this thread holds, this stops with a message instead of trapping in libdispatch
  /// without one. It cannot be interrupted: under the `service` policy it serves no
  /// initializer.
  ///
  /// - Parameters:
  ///   - file: The caller's file, for reports; leave the default.
  ///   - line: The caller's line, for reports; leave the default.
  ///   - work: The work to run on the queue.
  /// - Returns: What `work` returns.
  /// - Throws: What `work` throws.
  @inlinable
  public func trackedSync<Result, Failure: Error>(
    file: StaticString = #fileID, line: UInt = #line,
    execute work: () throws(Failure) -> Result
  ) throws(Failure) -> Result {
    let wait = _TrackedScope(syncOn: self, file: file, line: line)
    defer { wait.end() }
    // The result is kept here, in the caller's specialization: the non-generic `sync` neither
    // allocates a box for it nor builds generic metadata at run time.
    var outcome: Swift.Result<Result, Failure>?
    sync {
      wait.enter()
      outcome = Swift.Result { () throws(Failure) -> Result in try work() }
    }
    return try outcome.unsafelyUnwrapped.get()
  }
}

/// A tracked wait in progress: published from its initializer until ``end()``. `withTrackedWait`
/// and `trackedSync` are inlinable, so that each caller's specialization calls only these two
/// functions of MainOnce's; a semaphore or group wait uses it once its grace period is over.
@usableFromInline
struct _TrackedScope {
  // Unmanaged, and used through guaranteed references: the thread's record lives as long as
  // the thread, and keeps the tracked wait alive until it is given back (a nested wait's too),
  // so neither is retained or released on the way.
  let thread: Unmanaged<ThreadRecord>
  let record: Unmanaged<TrackedWait>
  let previous: UInt

  /// Publishes a `withTrackedWait` for `target`, for as long as `target` points to it: until
  /// ``end()``.
  @usableFromInline
  init(opaqueWaitFor target: UnsafePointer<WaitTarget>, file: StaticString, line: UInt) {
    self.init(
      target, operation: "withTrackedWait(for:)", site: CallSite(file: file, line: line),
      proof: .opaque)
  }

  /// Publishes a wait for `target` (or, for `trackedSync`, for `queue`); `serves`: a main-queue
  /// wait that runs the initializers queued for the main queue (the `service` policy).
  init(
    _ target: UnsafePointer<WaitTarget>?, operation: StaticString, site: CallSite,
    proof: WaitProof, queue: DispatchQueue? = nil, serves: Bool = false
  ) {
    let thread = ThreadRecord.currentUnmanaged
    let record = thread._withUnsafeGuaranteedRef { thread in
      let record = thread.takeTrackedWait(
        for: target, queue: queue, operation: operation, site: site, proof: proof,
        serves: serves)
      // Without introspection, the main queue's holder is known only from the waits that say
      // so.
      if !QueueOwnership.isAvailable {
        let holds = MainContext.isCurrent(on: thread)
        record._withUnsafeGuaranteedRef { $0.holdsMainQueue = holds }
      }
      return record
    }
    self.thread = thread
    self.record = record
    previous = thread._withUnsafeGuaranteedRef { thread in
      record._withUnsafeGuaranteedRef { WaitBoard.publish($0, on: thread) }
    }
  }

  /// Publishes the wait of a `sync` on `queue`, which the caller keeps alive, until ``end()``.
  /// Checks that the sync can start at all, and looks for a deadlock it may close.
  @usableFromInline
  init(syncOn queue: DispatchQueue, file: StaticString, line: UInt) {
    let site = CallSite(file: file, line: line)
    self.init(
      nil, operation: "DispatchQueue.trackedSync", site: site, proof: .structural, queue: queue)
    let owner = QueueOwnership.stopIfSyncWouldWaitForItself(
      on: queue, at: site, thread: thread._withUnsafeGuaranteedRef { $0.id })
    // A queue held by a thread that waits itself: this wait may close a deadlock that no
    // thread on it can look for again (a `trackedSync` cannot), so look once now. Published
    // first, and fenced, so that of two such waits closing a deadlock together, one sees the
    // other.
    if case .thread(let owner) = owner {
      atomicMemoryFence(ordering: .sequentiallyConsistent)
      if WaitBoard.isWaiting(owner) { Detector.lookBeforeBlocking(record.takeUnretainedValue()) }
    }
  }

  /// The work has started: the wait for the queue is over. A releasing store, no fence: a
  /// reader that still sees the wait open also reads the queue's owner, which is this thread
  /// from the moment the work started, so it finds no other thread in the wait's way.
  @usableFromInline
  func enter() {
    record._withUnsafeGuaranteedRef { $0.entered.store(true, ordering: .releasing) }
  }

  @usableFromInline
  func end() {
    thread._withUnsafeGuaranteedRef { thread in
      WaitBoard.withdraw(previous, on: thread)
      record._withUnsafeGuaranteedRef { thread.returnTrackedWait($0) }
    }
  }
}

/// A tracked wait, published while its thread waits. Each thread keeps one to reuse
/// (`ThreadRecord.takeTrackedWait`), so that publishing a wait allocates nothing.
final class TrackedWait: BlockingWait, @unchecked Sendable {
  // This is safe because the variables are written by the waiting thread only while the wait
  // is not published, and read by the deadlock detector only while it is, inside
  // `WaitBoard.read`, which a withdrawal waits for, but for `isInUse` and `nested`, which only
  // the waiting thread reads and writes; the marks and counters are atomics.
  let thread: ThreadID
  /// Whom the wait is for: a pointer into the waiting frame, valid while the wait is published
  /// (the only time the detector reads it).
  // This is safe because the waiting thread writes it only while the wait is unpublished.
  @exclusivity(unchecked) var target: UnsafePointer<WaitTarget>?
  /// For `trackedSync`, the queue instead of a target: kept alive by the waiting call.
  // This is safe because the waiting thread writes it only while the wait is unpublished.
  @exclusivity(unchecked) var syncQueue: Unmanaged<DispatchQueue>?
  // This is safe because the waiting thread writes it only while the wait is unpublished.
  @exclusivity(unchecked) var operation: StaticString = ""
  // This is safe because the waiting thread writes it only while the wait is unpublished.
  @exclusivity(unchecked) var site = CallSite(file: "", line: 0)
  // This is safe because the waiting thread writes it only while the wait is unpublished.
  @exclusivity(unchecked) var proof = WaitProof.opaque
  // This is safe because the waiting thread writes it only while the wait is unpublished.
  @exclusivity(unchecked) var holdsMainQueue = false
  // This is safe because the waiting thread writes it only while the wait is unpublished.
  @exclusivity(unchecked) var servesMainQueue = false
  /// Set by `trackedSync` when its work starts: the wait for the queue is over.
  let entered = Atomic(false)
  /// For a sliced wait: how many slices have started, and the number of the last that timed
  /// out.
  let startedSlices = Atomic<UInt>(0)
  let timedOutSlice = Atomic<UInt>(0)
  /// On a thread's spare (``ThreadRecord/spareTrackedWait``) only: whether a wait of the thread
  /// uses it now, and the fresh waits of the thread's nested waits, kept alive while they are
  /// used.
  // This is safe because only the waiting thread reads and writes it.
  @exclusivity(unchecked) var isInUse = false
  // This is safe because only the waiting thread reads and writes it.
  @exclusivity(unchecked) var nested: [TrackedWait] = []

  init(thread: ThreadID) {
    self.thread = thread
  }

  var isOver: Bool { entered.load(ordering: .sequentiallyConsistent) }
  func blockers() -> Blockers {
    isOver
      ? .none
      : waitTarget.blockers(of: thread, holdsMainQueue: holdsMainQueue, isSync: syncQueue != nil)
  }
  var note: String? { isOver ? nil : waitTarget.chainNote }

  /// Whom the wait is for. Only while the wait is published.
  private var waitTarget: WaitTarget {
    if let syncQueue { return WaitTarget(kind: .queue(syncQueue.takeUnretainedValue())) }
    return target!.pointee
  }
  var epoch: UInt { 0 }
  var slices: (started: UInt, lastTimedOut: UInt) {
    (
      startedSlices.load(ordering: .sequentiallyConsistent),
      timedOutSlice.load(ordering: .sequentiallyConsistent)
    )
  }
  var call: String { "\(operation) at \(site)" }
  var waitsFor: String { "\(waitTarget)" }
  var stallSubject: (any StallSubject)? { nil }
}

extension ThreadRecord {
  /// The tracked wait this thread reuses, so that publishing one allocates nothing: made at the
  /// thread's first tracked wait, and kept by its record (``trackedWaits``), unretained.
  var spareTrackedWait: Unmanaged<TrackedWait> {
    // This is safe because only this getter stores to the slot, and only a tracked wait.
    if let spare = trackedWaits { return Unmanaged.fromOpaque(spare.toOpaque()) }
    let spare = Unmanaged.passRetained(TrackedWait(thread: id))
    trackedWaits = Unmanaged.fromOpaque(spare.toOpaque())
    return spare
  }

  /// A tracked wait to publish, set up for one wait, unretained: the record keeps it alive until
  /// it is given back with ``returnTrackedWait(_:)``. A wait nested in another of this thread's
  /// gets a fresh one.
  func takeTrackedWait(
    for target: UnsafePointer<WaitTarget>?, queue: DispatchQueue?, operation: StaticString,
    site: CallSite, proof: WaitProof, serves: Bool
  ) -> Unmanaged<TrackedWait> {
    let spare = spareTrackedWait
    let wait = spare._withUnsafeGuaranteedRef { record -> Unmanaged<TrackedWait> in
      guard record.isInUse else {
        record.isInUse = true
        return spare
      }
      let fresh = TrackedWait(thread: id)
      record.nested.append(fresh)
      return .passUnretained(fresh)
    }
    wait._withUnsafeGuaranteedRef { wait in
      wait.target = target
      wait.syncQueue = queue.map { .passUnretained($0) }
      wait.operation = operation
      wait.site = site
      wait.proof = proof
      wait.holdsMainQueue = false
      wait.servesMainQueue = serves
      wait.entered.store(false, ordering: .relaxed)
    }
    return wait
  }

  func returnTrackedWait(_ wait: TrackedWait) {
    // Only the spare is ever marked in use: any other wait is a nested one, the last the spare
    // keeps.
    if wait.isInUse {
      wait.isInUse = false
    } else {
      _ = spareTrackedWait._withUnsafeGuaranteedRef { $0.nested.removeLast() }
    }
  }
}

/// The `service` policy (``DeadlockDetection/CyclePolicy/service``) for tracked waits: main-queue
/// code that blocks in `DispatchSemaphore.wait(for:)` or `DispatchGroup.wait(for:)` runs, in
/// place, the MainOnce initializers queued for the main queue, every millisecond while it
/// waits, whatever the wait-for graph says; as a run loop nested in main-queue code runs other
/// main-queue work. The engine runs them (`MainQueueEngine.runQueuedAttempts(on:)`): an
/// initializer's caller is answered as if its hop had run it; the hop, when it comes, finds
/// nothing to do.
enum ServicePolicy {
  /// Whether a wait on `thread` is to serve initializers: under `service`, in main context.
  static func applies(on thread: ThreadRecord) -> Bool {
    DeadlockDetection.cycles == .service && MainContext.isCurrent(on: thread)
  }
}
