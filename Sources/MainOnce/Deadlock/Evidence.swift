internal import Synchronization

/// The rule for calling a cycle a deadlock: every thread on it is blocked, at one same moment,
/// in the very wait MainOnce recorded for it, and nothing it waits for can change.
///
/// What shows that a thread is blocked in its wait depends on the wait
/// (``RecordedWait/Evidence``):
///
/// - A wait for a once-cell ends only when its caller is resolved, which its cell records
///   before it wakes the caller: unresolved is blocked.
/// - A semaphore, group or `trackedSync` wait: the thread is asleep in `futex` in two readings
///   of `/proc/self/task/<tid>`, taken one after the other for every thread on the cycle, and
///   has not run at all between them (its run time and slice count in `schedstat` are the
///   same). A thread that does not run between two readings was asleep all along, so the
///   threads were all asleep at once, at the moment between the two sweeps. Its end mark, read
///   after the second reading, says that the sleep was the wait's.
/// - A `withTrackedWait` closure may sleep anywhere and still return: only a thread in `futex`
///   that has not run at all for a whole stall timeout counts. Such a cycle is found by the
///   watchdog, one stall timeout after it formed at the earliest.
/// - The thread that closes the cycle is about to block in its wait, unless the wait is a
///   `withTrackedWait`, which the watchdog looks at again.
///
/// A thread asleep outside the blocking call itself (in a lock on its way in, or in an
/// initializer it serves in place under `service`) is not asleep in its wait: each wait marks
/// its blocking call (``RecordedWait/blocking``), and the mark must hold, unchanged, across the
/// readings. Nor does a wait with a deadline count. And every edge must still hold once the
/// evidence is in: the same wait recorded, the same blocker, the same runner or main-queue
/// holder (each subject's epoch unchanged). Where `/proc` cannot be read, only cycles of
/// once-cell waits can be proven.
enum Evidence {
  enum Verdict {
    /// A deadlock: the cycle as it was proven.
    case proven([CycleEdge])
    /// A cycle whose threads are not (yet) known to be blocked: look again.
    case unsettled
    /// No cycle any more.
    case gone
  }

  /// Weighs the evidence for `cycle`, which `closer`'s wait closed. `onClosingThread`: the
  /// closing thread asks, before it blocks. `baselines` keeps the readings that a no-progress
  /// rule compares with across calls.
  static func settle(
    _ cycle: [CycleEdge], closedBy closer: RecordedWait, onClosingThread: Bool,
    baselines: inout [ThreadID: (progress: ThreadProgress, at: UInt64)],
    graph: Locked<DetectorState> = Detector.state
  ) -> Verdict {
    let closerIsAboutToBlock = onClosingThread && closer.evidence != .opaque
    let before = cycle.map(EdgeState.init)
    // The threads whose sleep in their blocking call is the evidence, and their readings in
    // two sweeps.
    let sleepers = cycle.filter { edge in
      edge.wait.evidence != .resolution && !(closerIsAboutToBlock && edge.wait === closer)
    }
    if sleepers.contains(where: { EdgeState($0).isOutsideBlockingCall }) { return .unsettled }
    let sampled = sleepers.map(\.waiter)
    let first = sampled.map(ThreadSampler.reading)
    let second = sampled.map(ThreadSampler.reading)
    let now = Platform.monotonicNanoseconds()
    let timeout = DeadlockDetection.Snapshot.current.stallTimeoutNanoseconds
    var settled = true
    for (index, thread) in sampled.enumerated() {
      let (a, b) = (first[index], second[index])
      guard a.isAsleepInFutex, b.isAsleepInFutex, let progress = b.progress,
        a.progress == progress
      else {
        settled = false
        baselines[thread] = nil
        continue
      }
      guard let edge = cycle.first(where: { $0.waiter == thread }), edge.wait.evidence == .opaque
      else { continue }
      // No progress for a whole stall timeout, since a baseline taken earlier.
      if let baseline = baselines[thread], baseline.progress == progress {
        if now &- baseline.at < timeout { settled = false }
      } else {
        baselines[thread] = (progress, now)
        settled = false
      }
    }
    let after = cycle.map(EdgeState.init)
    guard !cycle.contains(where: { !$0.wait.canBeInCycle }) else { return .gone }
    guard settled, before == after else { return .unsettled }
    let holds = graph.withLock { state in
      cycle.allSatisfy { edge in
        state.activeWait(of: edge.waiter) === edge.wait
          && state.stillBlocks(edge.blocker, edge.wait)
      }
    }
    return holds ? .proven(cycle) : .gone
  }
}

/// What must not change on an edge while its evidence is gathered.
private struct EdgeState: Equatable {
  let blocking: UInt
  let epoch: UInt

  init(_ edge: CycleEdge) {
    blocking = edge.wait.blocking.load(ordering: .acquiring)
    epoch =
      if case .subject(let subject, _) = edge.wait.object { subject.epochNow } else { 0 }
  }

  var isOutsideBlockingCall: Bool { blocking & 1 == 0 }
}
