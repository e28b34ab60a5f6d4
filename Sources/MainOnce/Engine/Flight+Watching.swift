internal import Synchronization

// What the engine shows whoever watches its waits (`WaitObserver.swift`): a main-queue flight as
// a stall subject, and its blocked callers as blocking waits, with their one query
// (`blockers()`) and what a report says, each answered under the cell's lock; and the engine's
// timer for callers that do not block, which keeps a flight's bookkeeping and tells the
// observer about callers that outlived their grace.

/// A subject whose callers that do not block the engine's timer watches: a main-queue flight,
/// an `AsyncMainLazy` build.
protocol TimedSubject: StallSubject {
  /// ``StallSubject/stallSnapshot()`` at a look of the subject's timer, where the subject keeps
  /// its bookkeeping. The timer stops at the first look that finds no caller.
  func timerLook() -> StallSnapshot?
}

extension TimedSubject {
  /// Starts the timer that watches the subject for its callers that do not block (tasks,
  /// completion handlers); the first such caller starts it. It looks at the subject
  /// (``timerLook()``) a grace (`WaitBoard.grace`) later, then every
  /// `MainQueueEngine.timerInterval`, until a look finds no caller: at its first look that finds
  /// some, it tells the observer that they outlived their grace, and at each later one it calls
  /// what the observer returned.
  func startStallTimer() {
    #if DEBUG || MAINONCE_INSTRUMENTATION
      EngineCounters.noteSubject(self)
    #endif
    timerFires(after: WaitBoard.grace, then: nil)
  }

  private func timerFires(after delay: UInt64, then look: (@Sendable () -> Void)?) {
    Platform.runOnOvercommitQueue(afterNanoseconds: delay) {
      guard self.timerLook().map({ !$0.callers.isEmpty }) == true else { return }
      if let look { look() }
      let next =
        look ?? MainQueueEngine.observer?.callersOutlivedGrace(of: self) ?? { @Sendable in }
      self.timerFires(after: MainQueueEngine.timerInterval, then: next)
    }
  }
}

extension Flight: TimedSubject {
  func stallSnapshot() -> StallSnapshot? {
    OnceCell.withLock { snapshot(holding: $0) }
  }

  /// The stall snapshot, at a look of the flight's timer, which also keeps the flight's
  /// bookkeeping: once its token is freed, it lets go of the completion-form waits nothing can
  /// answer any more (ending a stall reported about them), and once no caller is left it
  /// forgets its timer, which stops, so that the next caller that does not block starts one.
  func timerLook() -> StallSnapshot? {
    var stranded: [Waiter] = []
    var ended: UInt64?
    let found = OnceCell.withLock { held -> StallSnapshot? in
      stranded = strandedWaits(holding: held)
      if !stranded.isEmpty { ended = endOfReportedStall(holding: held) }
      let seen = snapshot(holding: held)
      if seen?.callers.isEmpty ?? true {
        withMarks(holding: held) { marks, _ in marks.isTimed = false }
      }
      return seen
    }
    // After the lock: their handlers may run any deinit.
    stranded.removeAll()
    if let ended {
      MainQueueEngine.observer?.reportedWaitEnded(self, finished: false, waitingSince: ended)
    }
    return found
  }

  private func snapshot(holding held: borrowing OnceCell.Held) -> StallSnapshot? {
    guard outcome(holding: held) == nil else { return nil }
    let callers = callers(holding: held).compactMap { waiter -> StallSnapshot.Caller? in
      switch waiter.kind {
      case .thread(_, let thread):
        .init(
          kind: .thread, thread: thread, site: waiter.site, since: waiter.since,
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
      withMarks(holding: held) { marks, machine in
        guard marks.reportedSince == nil, machine.outcome == nil else { return false }
        marks.reportedSince = waitingSince
        return true
      }
    }
  }

  /// Whether a timer must be started to watch the flight for callers that do not block: the
  /// first such caller's.
  func claimTimer(holding held: borrowing OnceCell.Held) -> Bool {
    withMarks(holding: held) { marks, _ in
      defer { marks.isTimed = true }
      return !marks.isTimed
    }
  }

}

extension Waiter: BlockingWait {
  var thread: ThreadID {
    guard case .thread(_, let thread) = kind else { return ThreadID(rawValue: 0) }
    return thread
  }
  var proof: WaitProof { .structural }
  // A caller in main context that brings an attempt runs the flight itself, and never parks; a
  // wait without one parks there, and runs what is queued for the main queue meanwhile.
  var holdsMainQueue: Bool { servesMainQueue }
  var isOver: Bool { isResolved.load(ordering: .acquiring) }

  func blockers() -> Blockers {
    OnceCell.withLock { held in
      guard resolution == nil, let flight = flight(holding: held),
        flight.outcome(holding: held) == nil
      else {
        return .none
      }
      if let runner = flight.runner(holding: held) {
        return .thread(runner.thread, reason: ", which runs it")
      }
      // A wait that never initializes, with no attempt queued, waits for a caller to bring
      // one: nobody MainOnce knows of. Its stall is reported.
      return flight.hasQueuedAttempt(holding: held) ? .mainQueue : .none
    }
  }

  var epoch: UInt {
    OnceCell.withLock { flight(holding: $0)?.epoch.load(ordering: .acquiring) ?? 0 }
  }
  var slices: (started: UInt, lastTimedOut: UInt) { (0, 0) }
  var call: String {
    // A wait passes its call site, a lazy value's `value` cannot.
    guard bringsAttempt else { return "\(label.waitOperation) at \(site)" }
    return label.hasCallSites ? "\(label.operation) at \(site)" : "\(label.operation)"
  }
  var waitsFor: String { label.waitedFor }
  var stallSubject: (any StallSubject)? { OnceCell.withLock { flight(holding: $0) } }
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
