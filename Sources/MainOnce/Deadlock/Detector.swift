internal import Dispatch
internal import Synchronization

/// The deadlock detector: it runs only for a wait that has outlived its grace period, on that
/// wait's own thread, or on the engine's timer for callers that do not block. It has no thread of
/// its own, and keeps no state but what each watched wait keeps on its stack and the list of
/// deadlocks it has reported.
///
/// It is the engine's observer (`WaitObserver`, installed by the API's first slow path), told
/// of a blocked wait that outlived `WaitBoard.gracePeriod`
/// (``waitOutlivedGracePeriod(_:since:park:)``, also called by a tracked wait), of callers that do
/// not block that outlived it (``callersOutlivedGracePeriod(of:)``), and of the end of a stall it
/// reported (``reportedWaitEnded(_:finished:waitingSince:)``). It reads the waits threads block
/// in from the `WaitBoard`, and each wait's state through `BlockingWait`.
///
/// A watched wait looks for a deadlock through it (``WaitGraph``) at once, then again after a
/// ``slice`` while it has a candidate, and otherwise less and less often, up to every
/// ``longestLookInterval``: the wait that closes a deadlock looks itself (a blocked caller, a
/// semaphore or group wait once its grace period is over, a `trackedSync` before it blocks), so the
/// others look again only for deadlocks closed by a wait that cannot (`withTrackedWait`). One
/// whose every wait can prove that it is blocked (`WaitProof`) is a candidate: proven once a later
/// reading finds the same waits blocked the same way (at once, by a second reading, where every
/// wait shows it by its state), and every semaphore or group wait among them through a slice
/// that began after the first reading. It is then stopped (or reported, under `report`). A
/// deadlock through a wait MainOnce cannot see into is reported once, and waiting goes on.
/// Independently, once the wait has lasted the stall timeout, its subject is reported once;
/// under the stall response `abort`, a look a timeout later stops the process if the thread in
/// the way has not run at all in between (``StallWatch``).
enum Detector: WaitObserver {
  /// How long a watched wait sleeps between two checks; a semaphore or group wait's slice.
  static let slice: UInt64 = 25_000_000
  /// The longest interval between two looks at the wait-for graph by a wait with no candidate.
  static let longestLookInterval: UInt64 = 400_000_000

  /// Watches `wait`, blocked on the calling thread since `since`, until `park` returns `true`:
  /// `park` waits until the deadline it is given, and says whether the wait has ended.
  static func waitOutlivedGracePeriod(
    _ wait: any BlockingWait,
    since: UInt64 = Platform.monotonicNanoseconds() &- WaitBoard.gracePeriod,
    park: (DispatchTime) -> Bool
  ) {
    var candidate: CandidateDeadlock?
    var isCycleReported = false
    var stall = StallWatch()
    var interval = slice
    var nextLook: UInt64 = 0
    repeat {
      // After a failed heavy barrier, readers skip the wait until it is published again.
      WaitBoard.republishOwnWait()
      let now = Platform.monotonicNanoseconds()
      let response = DeadlockDetection.cycles
      if response != .off, !isCycleReported, now >= nextLook {
        isCycleReported = look(for: wait, response: response, candidate: &candidate)
        interval = candidate == nil ? min(interval * 2, longestLookInterval) : slice
        nextLook = now &+ interval
      }
      if let subject = wait.stallSubject {
        stall.look(at: subject, site: wait.site, waitingSince: since, now: now)
      }
    } while !park(.now() + .nanoseconds(Int(slice)))
  }

  /// Looks for a deadlock through `wait`; `true` once one was reported (and the process goes on).
  private static func look(
    for wait: any BlockingWait, response: DeadlockDetection.CyclePolicy,
    candidate: inout CandidateDeadlock?
  ) -> Bool {
    guard let edges = WaitGraph.read().deadlock(through: wait.thread) else {
      candidate = nil
      return false
    }
    let found = CandidateDeadlock(edges: edges)
    guard found.canBeProven else {
      // Every thread on it may find it: the first reports it.
      if reported.withLock({ $0.insert(found.signature).inserted }) {
        DeadlockReport.cycle(edges, proven: false, response: response).deliver(at: wait.site)
      }
      return true
    }
    // The first reading of this deadlock is kept until its evidence is in. Waits that show they
    // are blocked by their state alone are proven by a second reading, at once: each was in the
    // same wait at both, so all were blocked together at a moment between them.
    let isNew = candidate?.isSame(as: edges) != true
    if isNew { candidate = found }
    var isProven = !isNew && candidate!.isProven(by: edges)
    if !isProven, found.needsNoSlice,
      let again = WaitGraph.read().deadlock(through: wait.thread)
    {
      isProven = found.isProven(by: again)
    }
    guard isProven else { return false }
    if reported.withLock({ $0.insert(found.signature).inserted }) {
      DeadlockReport.cycle(edges, proven: true, response: response)
        .deliver(at: wait.site, patience: DeadlockDetection.Snapshot.current.handlerPatience)
    }
    return true
  }

  /// The deadlocks reported so far, by their waits: each thread on one may find it, and it is
  /// reported once.
  private static let reported = Locked<Set<[UInt]>>([])

  /// Watches the stall of `subject`, whose callers do not block (tasks, completion handlers), at
  /// each look of the engine's timer, for as long as it has callers.
  static func callersOutlivedGracePeriod(of subject: any StallSubject) -> @Sendable () -> Void {
    let watch = TimerWatch(subject: subject)
    return { watch.look() }
  }

  /// Looks once for a deadlock through `wait`, whose thread is about to block where it cannot
  /// look again (`trackedSync`): the last wait of a deadlock of such waits closes it here.
  static func lookBeforeBlocking(_ wait: any BlockingWait) {
    let response = DeadlockDetection.cycles
    guard response != .off else { return }
    var candidate: CandidateDeadlock?
    _ = look(for: wait, response: response, candidate: &candidate)
  }

  /// A subject that was reported has ended: it finished, or no caller waits for it any more.
  static func reportedWaitEnded(
    _ subject: any StallSubject, finished: Bool, waitingSince: UInt64
  ) {
    DeadlockReport.stallEnded(of: subject.label, finished: finished, waitingSince: waitingSince)
      .deliver(at: nil)
  }
}

/// The stall of a subject whose callers do not block, looked at by the engine's timer.
private final class TimerWatch: @unchecked Sendable {
  // This is safe because `stall` is only used by `look()`, which the subject's timer calls at
  // its looks, one at a time, each after the one before.
  let subject: any StallSubject
  var stall = StallWatch()

  init(subject: any StallSubject) { self.subject = subject }

  /// When the first caller that does not block began to wait: a grace period before the timer first
  /// fired.
  let since = Platform.monotonicNanoseconds() &- WaitBoard.gracePeriod

  func look() {
    stall.look(at: subject, site: nil, waitingSince: since, now: Platform.monotonicNanoseconds())
  }
}
