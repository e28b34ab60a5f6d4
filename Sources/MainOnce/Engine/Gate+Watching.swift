internal import Synchronization

// What the engine shows whoever watches its waits (`WaitObserver.swift`): a main-queue gate as
// a stall subject, and its blocked callers as blocking waits, with their one query
// (`blockers()`) and what a report says, each answered under the cell's lock. Read-only, but
// for the claim of a stall report, which marks the gate so that the end of that stall is told
// once (`Gate.endOfReportedStall(holding:)`).

extension Gate: StallSubject {
  func stallSnapshot() -> StallSnapshot? {
    OnceCell.withLock { snapshot(holding: $0) }
  }

  /// Who waits for the gate and what is in the way; `nil` once it has finished.
  func snapshot(holding held: borrowing OnceCell.LockHeld) -> StallSnapshot? {
    guard outcome(holding: held) == nil else { return nil }
    let callers = callers(holding: held).compactMap { waiter -> StallSnapshot.Caller? in
      switch waiter.kind {
      case .thread(let parked):
        .init(
          kind: .thread, thread: parked.id, site: waiter.site, since: waiter.since,
          bringsAttempt: waiter.bringsAttempt)
      case .task:
        .init(
          kind: .task, thread: nil, site: waiter.site, since: waiter.since,
          bringsAttempt: waiter.bringsAttempt)
      case .handler:
        .init(
          kind: .handler, thread: nil, site: waiter.site, since: waiter.since,
          bringsAttempt: waiter.bringsAttempt)
      case .inPlace: nil
      }
    }
    let obstacle: StallSnapshot.Obstacle =
      if let runner = runner(holding: held) {
        .runner(runner.thread, since: runner.since)
      } else if hasQueuedAttempt(holding: held) {
        .mainQueue
      } else {
        .noAttempt
      }
    var snapshot = StallSnapshot(callers: callers, obstacle: obstacle)
    if self.callers(holding: held).contains(where: \.servesMainQueue) {
      snapshot.notes.append(
        "the wait in main context holds the main queue: an initializer queued there"
          + " (DispatchQueue.main.async, a @MainActor task) cannot run until it returns")
    }
    return snapshot
  }

  func claimStallReport(waitingSince: UInt64) -> Bool {
    OnceCell.withLock { held in
      withStallTracking(holding: held) { stallTracking, machine in
        guard stallTracking.reportedSince == nil, machine.outcome == nil else { return false }
        stallTracking.reportedSince = waitingSince
        return true
      }
    }
  }
}

extension Waiter: BlockingWait {
  var thread: ThreadID {
    guard case .thread(let parked) = kind else { return ThreadID(rawValue: 0) }
    return parked.id
  }
  var proof: WaitProof { .structural }
  // A caller in main context that brings an attempt runs the gate itself, and never parks; a
  // wait without one parks there, and runs what is queued for the main queue meanwhile.
  var holdsMainQueue: Bool { servesMainQueue }
  var isOver: Bool { isResolved.load(ordering: .acquiring) }

  func blockers() -> Blockers {
    OnceCell.withLock { held in
      guard answer == nil, let gate = gate(holding: held),
        gate.outcome(holding: held) == nil
      else {
        return .none
      }
      if let runner = gate.runner(holding: held) {
        return .thread(runner.thread, reason: ", which runs it")
      }
      // A wait that never initializes, with no attempt queued, waits for a caller to bring
      // one: nobody MainOnce knows of. Its stall is reported.
      return gate.hasQueuedAttempt(holding: held) ? .mainQueue : .none
    }
  }

  var epoch: UInt {
    OnceCell.withLock { gate(holding: $0)?.epoch.load(ordering: .acquiring) ?? 0 }
  }
  var slices: (started: UInt, lastTimedOut: UInt) { (0, 0) }
  var call: String {
    // A wait passes its call site, a lazy value's `value` cannot.
    guard bringsAttempt else { return "\(label.waitOperation) at \(site)" }
    return label.hasCallSites ? "\(label.operation) at \(site)" : "\(label.operation)"
  }
  var waitsFor: String { label.waitedFor }
  var stallSubject: (any StallSubject)? { OnceCell.withLock { gate(holding: $0) } }
}

extension CellLabel {
  /// The cell as the object of "waits for …" in a report.
  var waitedFor: String {
    if case .object(let objectType, _, _) = self {
      "the \(work) for the same \(objectType)"
    } else {
      "the \(work) of \(self)"
    }
  }
}
