internal import Dispatch
internal import Synchronization

/// The once-cell behind ``runOnce(for:file:line:column:_:)``: one object's call site, whose
/// body runs on the calling thread.
///
/// A far simpler problem than the main queue's: the first caller runs its body where it is,
/// and later callers park until it returns. If the body throws, the turn goes to the first
/// caller that waits, which runs its own body. Its states and transitions are the table of
/// `RunOnceMachine.swift`, which this cell runs under ``lock``.
///
/// The word is stored with a releasing store after the body returned, and read with an
/// acquiring load: the body's writes happen before every return. The run is an object of its
/// own, dropped once done, so that a done call site keeps nothing but the cell.
final class RunOnceCell: ObjectCell, @unchecked Sendable {
  // This is safe because its one mutable field, `current`, is reachable only with the lock's
  // proof (``withRun(holding:_:)``, a `Guarded`), and so is the machine of the run it holds;
  // what `ObjectCell` holds is safe for the reasons its comment gives.

  /// A caller waiting for the runner, and what it is told.
  final class Waiter: QueueLinked, @unchecked Sendable {
    // This is safe because its two mutable fields are each reached in one way only: `turn`,
    // written only by ``tell(_:holding:)``, with the lock's proof, before the releasing store
    // that sets `isResolved`, and read only by ``answeredTurn``, after an acquiring load finds
    // it set (nothing writes it again); and `link`, which only ``WaiterQueue`` reads and
    // writes, inside the run's machine (reachable only with the lock's proof) or in the effects
    // that took the waiter out of it, which own it until they wake it.
    typealias Turn = RunOnceTurn
    let thread: ThreadID
    let site: CallSite
    let parker: Parker
    let cell: RunOnceCell
    private var turn: Turn?
    var link = QueueLink<Waiter>()
    let isResolved = Atomic(false)

    init(thread: ThreadID, site: CallSite, parker: Parker, cell: RunOnceCell) {
      self.thread = thread
      self.site = site
      self.parker = parker
      self.cell = cell
    }

    /// Tells the caller its turn, holding the lock: from here on it is answered.
    func tell(_ turn: Turn, holding _: borrowing LockHeld) {
      self.turn = turn
      isResolved.store(true, ordering: .releasing)
    }

    /// What the caller was told, once it is answered (`nil` before).
    var answeredTurn: Turn? { isResolved.load(ordering: .acquiring) ? turn : nil }
  }

  /// The waiters of a run, in arrival order: a list threaded through them, so that queueing
  /// one allocates nothing. Under the lock, or owned by the effects that answered them.
  typealias WaiterQueue = LinkedQueue<Waiter>

  /// A run in progress: its machine (the thread running a body, and the callers waiting).
  final class Run {
    private var machine: Guarded<RunOnceMachine<WaiterQueue, ThreadID>, LockHeld>
    /// Bumped whenever the runner changes, for the deadlock detector.
    let epoch = Atomic<UInt>(0)

    init(runner: ThreadID) {
      machine = Guarded(RunOnceMachine(runner: runner))
    }

    /// Reads or changes the run's machine, holding the lock.
    func withMachine<Result>(
      holding held: borrowing LockHeld,
      _ body: (inout RunOnceMachine<WaiterQueue, ThreadID>) -> Result
    ) -> Result {
      machine.modify(held, body)
    }
  }

  /// Guards every `RunOnceCell`: taken on the slow path only, for a few instructions at a time,
  /// through ``withLock(_:)``.
  private static let lock = Lock(rank: .runOnceCell)

  /// What proves that the caller holds ``lock``: only ``withLock(_:)`` makes one, and its body
  /// only borrows it.
  struct LockHeld: ~Copyable {
    fileprivate init() {}
  }

  /// Runs `body` holding the lock that guards every `runOnce(for:)` run.
  static func withLock<Result, Failure: Error>(
    _ body: (borrowing LockHeld) throws(Failure) -> Result
  ) throws(Failure) -> Result {
    try lock.withLock { () throws(Failure) -> Result in try body(LockHeld()) }
  }

  /// The run in progress, if any.
  private var current = Guarded<Run?, LockHeld>(nil)
  let objectType: TypeName

  override init(object: AnyObject, key: ObjectCells.Key) {
    objectType = TypeName(type(of: object))
    super.init(object: object, key: key)
  }

  var label: CellLabel { .object(objectType: objectType, site: site, operation: "runOnce(for:)") }

  /// The run in progress, if any, holding the lock.
  func withRun<Result>(holding held: borrowing LockHeld, _ body: (inout Run?) -> Result) -> Result {
    current.modify(held, body)
  }

  private enum Step {
    case done
    case run
    case park(Waiter)
    case reentrant
  }

  /// Runs `body` unless the call site is done or running elsewhere; waits for the runner then.
  func run<Failure: Error>(site: CallSite, _ body: () throws(Failure) -> Void) throws(Failure) {
    if word.isPublished { return }
    let thread = ThreadRecord.current(at: site)
    let parker = thread.takeParker()
    defer { thread.returnParker(parker) }
    var step = Self.withLock { held -> Step in
      if word.isPublished { return .done }
      guard let run = current.read(held) else {
        current.modify(held) { $0 = Run(runner: thread.id) }
        return .run
      }
      let waiter = Waiter(thread: thread.id, site: site, parker: parker, cell: self)
      switch run.withMachine(holding: held, { $0.arrive(waiter, on: thread.id) }) {
      case .reentrant: return .reentrant
      case .wait: return .park(waiter)
      }
    }
    while true {
      switch step {
      case .done:
        return
      case .reentrant:
        Diagnostics.reentrance(label, firstCall: self.site, secondCall: site)
      case .park(let waiter):
        MainQueueEngine.park(waiter, on: thread, parker: parker)
        guard case .yours = waiter.answeredTurn! else { return }
        step = .run
      case .run:
        do {
          try body()
        } catch {
          transition { run, held in
            run.epoch.add(1, ordering: .releasing)
            return run.withMachine(holding: held) { $0.bodyThrew(threadOf: \.thread) }
          }
          throw error
        }
        transition { run, held in run.withMachine(holding: held) { $0.bodyReturned() } }
        return
      }
    }
  }

  /// Makes one transition of the run in progress under the lock, and performs its effects
  /// there and after the lock (see `RunOnceMachine.swift`), with this cell as their place.
  private func transition(_ body: (Run, borrowing LockHeld) -> RunOnceEffects<WaiterQueue>) {
    var shell = self
    let effects = Self.withLock { held in
      let effects = body(current.read(held)!, held)
      effects.performUnderLock(in: &shell, holding: held)
      return effects
    }
    effects.performAfterLock(in: &shell)
  }
}

// MARK: - Where a run's effects are performed

extension RunOnceCell: RunOnceShell {
  typealias Callers = WaiterQueue

  func publish(holding _: borrowing LockHeld) { word.word.store(0, ordering: .releasing) }

  func record(_ turn: RunOnceTurn, of waiter: Waiter, holding held: borrowing LockHeld) {
    waiter.tell(turn, holding: held)
  }

  func endRun(holding held: borrowing LockHeld) { current.modify(held) { $0 = nil } }

  func unpark(_ waiter: Waiter) { waiter.parker.unpark() }
}

extension RunOnceCell.Waiter: BlockingWait {
  var proof: WaitProof { .structural }
  var holdsMainQueue: Bool { false }
  var servesMainQueue: Bool { false }
  var isOver: Bool { isResolved.load(ordering: .acquiring) }

  func blockers() -> Blockers {
    RunOnceCell.withLock { held in
      guard answeredTurn == nil, let run = cell.withRun(holding: held, { $0 }) else { return .none }
      return .thread(run.withMachine(holding: held) { $0.runner }, reason: ", which runs it")
    }
  }

  var epoch: UInt {
    RunOnceCell.withLock { held in
      cell.withRun(holding: held) { $0?.epoch.load(ordering: .acquiring) } ?? 0
    }
  }
  var slices: (started: UInt, lastTimedOut: UInt) { (0, 0) }
  var call: String { "runOnce(for:) at \(site)" }
  var waitsFor: String { cell.label.waitedFor }
  // Its body runs on its callers' threads, for as long as it takes: not watched for stalls.
  var stallSubject: (any StallSubject)? { nil }
}
