internal import Synchronization

// MARK: - A gate: the calls in progress for a once-cell, and its callers
//
// A gate is attached to a cell's word while calls are in progress (see `OnceCell.swift`); it
// runs the cell's state machine (`GateMachine.swift`) and holds each caller's record. Its
// state, and the fields of a caller that only the lock's holder may touch, are reachable only
// with proof that the engine's lock is held (`OnceCell.LockHeld`), or only from this file, where
// every access is made under that proof.

/// The calls in progress for one cell that is not done: its ``GateMachine``, and what the
/// engine keeps beside it. It is the cell's identity while calls are in progress: the storage
/// retains it, and so does everything that refers to the cell from outside a borrow (a hop, a
/// waiter, the deadlock detector). An object cannot be reallocated while it is retained, so
/// nothing left over from one cell can act on another cell that reuses the storage's address.
final class Gate: @unchecked Sendable {
  // This is safe because its machine and stall tracking, and the list of gates awaiting a hop, are
  // reachable only through methods that take proof that the caller holds the engine's lock
  // (`OnceCell.LockHeld`), which keeps other threads out; the bodies those methods run never call
  // back into the gate, so no access overlaps another on the same thread, and they skip the
  // dynamic check. `label` never changes, and `epoch` and `storageIsGone` are atomics.

  /// What the engine keeps about watching a gate, beside its machine: the claim of its stall
  /// report, whose end it owes the observer, and its timer.
  struct StallTracking {
    /// When the oldest caller had begun to wait, once an observer claimed the gate's stall
    /// report (``claimStallReport(waitingSince:)``): the engine tells it when that stall ends,
    /// once, and the report of the end says how long they waited.
    var reportedSince: UInt64?
    /// Set while the engine's timer watches the gate for callers that do not block.
    var isTimed = false
  }

  let label: CellLabel
  // This is safe because only methods that take the lock's proof reach it.
  @exclusivity(unchecked) private var machine = GateMachine(callers: WaiterQueue())
  // This is safe because only methods that take the lock's proof reach it.
  @exclusivity(unchecked) private var stallTracking = StallTracking()
  /// Bumped whenever the runner changes: the deadlock detector checks that it did not change
  /// while it gathered evidence.
  let epoch = Atomic<UInt>(0)
  /// Set when the storage it is attached to is freed (``storageFreed(_:)``).
  private let storageIsGone = Atomic(false)

  init(label: CellLabel) { self.label = label }

  /// Reads or changes the stall tracking, reading the machine: only the methods below, which
  /// check its invariant after each transition, change the machine.
  func withStallTracking<Result>(
    holding _: borrowing OnceCell.LockHeld,
    _ body: (inout StallTracking, borrowing GateMachine<WaiterQueue>) -> Result
  ) -> Result {
    body(&stallTracking, machine)
  }

  /// The value of the attempt that succeeded, once one has.
  func outcome(holding _: borrowing OnceCell.LockHeld) -> UInt? { machine.outcome }
  /// The callers queued or running, in arrival order.
  func callers(holding _: borrowing OnceCell.LockHeld) -> [Waiter] { Array(machine.callers) }

  /// The thread in main context that runs the gate's attempts, and the attempt it runs.
  func runner(holding held: borrowing OnceCell.LockHeld) -> Runner? {
    guard let thread = machine.runner, let owner = machine.running else { return nil }
    return Runner(thread: thread, site: owner.site, since: owner.startedAt)
  }

  /// When the callers of a reported gate had begun to wait, if it was reported and nobody
  /// waits for it any more (it finished, or its last caller left); the engine then tells the
  /// observer, once. The engine asks after an attempt's end, a cancellation and a look of its
  /// timer; only a gate whose stall an observer reported gets past the first check.
  func endOfReportedStall(holding _: borrowing OnceCell.LockHeld) -> UInt64? {
    guard let since = stallTracking.reportedSince,
      machine.outcome != nil || machine.callers.isEmpty && machine.runner == nil
    else { return nil }
    stallTracking.reportedSince = nil
    return since
  }

  /// Gates whose hop is on its way, and has not started: main-queue code that waits under the
  /// `service` policy runs them in place.
  // This is safe because only methods that take the lock's proof reach it.
  @exclusivity(unchecked) nonisolated(unsafe) private static var awaitingHop: [Gate] = []

  /// The gates whose hop is on its way, and has not started.
  static func awaitingHop(holding _: borrowing OnceCell.LockHeld) -> [Gate] { awaitingHop }

  /// The parker of the wait without an attempt that blocks the main queue now, if one does:
  /// every attempt queued while it waits wakes it, to run the attempts no hop can
  /// (`MainQueueEngine.serve(until:on:parker:)`).
  // This is safe because only methods that take the lock's proof reach it.
  @exclusivity(unchecked) nonisolated(unsafe) private static var servingWait: ParkedThread?

  /// Makes `parker` the serving wait's (`nil`: none), and returns the one it replaces: a wait
  /// nested in an attempt that the outer one runs puts that one back when it ends.
  static func serve(
    with parker: ParkedThread?, holding _: borrowing OnceCell.LockHeld
  ) -> ParkedThread? {
    defer { servingWait = parker }
    return servingWait
  }

  /// ``GateMachine/arrive(_:on:inMainContext:isCancelled:bringsAttempt:)``: queues `waiter`
  /// unless it is re-entrant or cancelled, and returns what it does next and the effects to
  /// perform. A caller that does not block (`timed`: a task, a completion handler) starts the
  /// gate's stall timer if it is the first to wait. The waiter refers to the gate from here
  /// on, unless it is answered on the spot (which clears it) or re-entrant (which stops).
  func arrive(
    _ waiter: Waiter, on thread: ThreadID?, inMainContext: Bool, isCancelled: Bool = false,
    timed: Bool = false, holding held: borrowing OnceCell.LockHeld
  ) -> (Arrival<Waiter, ThreadID>, GateEffects<WaiterQueue>) {
    waiter.gate = self
    var step = transition(holding: held) {
      $0.arrive(
        waiter, on: thread, inMainContext: inMainContext, isCancelled: isCancelled,
        bringsAttempt: waiter.bringsAttempt)
    }
    if timed, case .wait = step.0 {
      (step.1.startsTimer, stallTracking.isTimed) = (!stallTracking.isTimed, true)
    }
    return step
  }

  /// ``GateMachine/mainQueueReached(on:isHop:)``.
  func mainQueueReached(
    on thread: ThreadID, isHop: Bool, holding held: borrowing OnceCell.LockHeld
  ) -> (HopStep<Waiter, ThreadID>, GateEffects<WaiterQueue>) {
    transition(holding: held) { $0.mainQueueReached(on: thread, isHop: isHop) }
  }

  /// ``GateMachine/init(callers:adopting:runBy:)``: takes over an attempt that `thread` runs
  /// in place for the cell whose storage is `word`. The caller that stands in for the one
  /// running it is made here, by the thread that arrived (its site is that thread's, and never
  /// shown: a re-entrant call names the in-place call from its own thread's record).
  func adoptInPlaceRun(
    by thread: ThreadID, in word: UnsafePointer<_OnceWord>,
    holding held: borrowing OnceCell.LockHeld
  ) {
    let standIn = Waiter(
      site: CallSite(file: "", line: 0), label: label, kind: .inPlace, attempt: nil,
      storage: word)
    standIn.gate = self
    transition(holding: held) {
      $0 = GateMachine(callers: WaiterQueue(), adopting: standIn, runBy: thread)
    }
  }

  /// The caller whose attempt runs, if one does.
  func running(holding _: borrowing OnceCell.LockHeld) -> Waiter? { machine.running }

  /// Whether a caller's attempt is queued, not started yet.
  func hasQueuedAttempt(holding _: borrowing OnceCell.LockHeld) -> Bool { machine.hasQueuedAttempt }

  /// ``GateMachine/startNextAttempt(on:)``: the caller whose attempt `thread` runs next, and
  /// that attempt.
  func startNextAttempt(on thread: ThreadID, holding held: borrowing OnceCell.LockHeld) -> Waiter? {
    transition(holding: held) { $0.startNextAttempt(on: thread) }
  }

  /// ``GateMachine/settle(_:with:on:)``: records the end of `owner`'s attempt, its value or
  /// its error, and starts the next on `thread`. When nothing runs next, a stall an observer
  /// reported has ended.
  func settle(
    _ owner: Waiter, with result: Result<UInt, any Error>, on thread: ThreadID,
    holding held: borrowing OnceCell.LockHeld
  ) -> (next: Waiter?, GateEffects<WaiterQueue>) {
    var step = transition(holding: held) { $0.settle(owner, with: try? result.get(), on: thread) }
    if case .failure(let error) = result { step.1.failure = error }
    if step.next == nil, stallTracking.reportedSince != nil,
      let since = endOfReportedStall(holding: held)
    {
      step.1.stallEnded = (since, machine.outcome != nil)
    }
    return step
  }

  /// ``GateMachine/cancel(_:)``: takes a task's waiter out of the queue after its task was
  /// cancelled, unless its attempt has started or it is resolved already.
  func cancel(
    _ waiter: Waiter, holding held: borrowing OnceCell.LockHeld
  ) -> GateEffects<WaiterQueue> {
    var effects = transition(holding: held) { $0.cancel(waiter) }
    // Nobody is left to watch for: the next caller that does not block starts a timer again.
    if machine.callers.isEmpty { stallTracking.isTimed = false }
    if let since = endOfReportedStall(holding: held) { effects.stallEnded = (since, false) }
    return effects
  }

  /// Applies one transition of the machine, then what the engine keeps beside it: the epoch its
  /// watchers read, when the attempt that runs started; and checks the machine's invariant, in
  /// release builds too: queued callers without a runner or a hop would wait for ever.
  /// Called only by the methods above, which take proof that the caller holds the lock.
  private func transition<Result>(
    holding held: borrowing OnceCell.LockHeld, _ body: (inout GateMachine<WaiterQueue>) -> Result
  ) -> Result {
    let (runner, running) = (machine.runner, machine.running)
    let result = body(&machine)
    if machine.runner != runner { epoch.add(1, ordering: .releasing) }
    if let owner = machine.running, owner !== running {
      owner.startedAt = Platform.monotonicNanoseconds()
    }
    guard machine.invariantHolds else {
      Diagnostics.internalInconsistency(
        "callers wait for \(label), which nobody runs and no hop will reach")
    }
    return result
  }

  // MARK: Retained by the storage

  /// The gate whose tagged address is `raw`, if it is one.
  static func attached(_ raw: UInt, holding _: borrowing OnceCell.LockHeld) -> Gate? {
    reference(raw)?.takeUnretainedValue()
  }

  /// A +1 reference for the storage to hold, tagged as not done.
  func retainedForStorage() -> UInt {
    UInt(bitPattern: Unmanaged.passRetained(self).toOpaque()) | 1
  }

  /// Gives back the storage's reference, if `raw` is a gate's.
  static func releaseAttached(_ raw: UInt) {
    reference(raw)?.release()
  }

  /// The storage whose word is `raw` is being freed: if a gate is attached, it is marked,
  /// and the storage's reference given back. No lock: a token may be freed anywhere, also where
  /// the engine's lock is held (a closure released under it may hold the last reference).
  static func storageFreed(_ raw: UInt) {
    guard let gate = reference(raw) else { return }
    gate.takeUnretainedValue().storageIsGone.store(true, ordering: .releasing)
    gate.release()
  }

  /// If the storage is gone, tells the machine so (``GateMachine/storageFreed()``): its
  /// effects let go of the completion-form waits that nothing can answer any more, after the
  /// lock, and tell the observer that a stall it reported about them ended. A look of the
  /// gate's stall timer asks: a gate with such a wait has one running, started by the first
  /// caller that does not block, and stopped (and forgotten, so that the next such caller starts
  /// one again) only once no caller is left.
  func strandedWaits(holding held: borrowing OnceCell.LockHeld) -> GateEffects<WaiterQueue> {
    guard storageIsGone.load(ordering: .acquiring) else { return GateEffects() }
    var effects = transition(holding: held) { $0.storageFreed() }
    if !effects.callers.isEmpty, let since = endOfReportedStall(holding: held) {
      effects.stallEnded = (since, false)
    }
    return effects
  }

  private static func reference(_ raw: UInt) -> Unmanaged<Gate>? {
    guard raw & 0b11 == 1, let pointer = UnsafeRawPointer(bitPattern: raw & ~1) else { return nil }
    return Unmanaged<Gate>.fromOpaque(pointer)
  }
}

// MARK: - Where a gate's effects are performed

extension Gate: GateShell {
  typealias Callers = WaiterQueue

  func wakeup(of waiter: Waiter) -> Waiter.Kind { waiter.kind }

  func servingWait(holding _: borrowing OnceCell.LockHeld) -> ParkedThread? { Self.servingWait }

  func listAwaitingHop(_ awaits: Bool, holding _: borrowing OnceCell.LockHeld) {
    if awaits { Self.awaitingHop.append(self) } else { Self.awaitingHop.removeAll { $0 === self } }
  }

  /// The waiter leaves the gate, and from here on nothing runs its attempt. The releasing
  /// store orders the answer before any read that finds it set.
  func record(
    _ verdict: Verdict, failure: (any Error)?, of waiter: Waiter,
    holding _: borrowing OnceCell.LockHeld
  ) {
    waiter.gate = nil
    waiter.resolution = verdict == .done ? .done : Resolution(verdict, failure: failure)
    waiter.isResolved.store(true, ordering: .releasing)
  }

  func release(
    _ submit: @Sendable (Resolution) -> Void, of waiter: Waiter,
    holding _: borrowing OnceCell.LockHeld
  ) {
    submit(waiter.answer!)
  }

  func publish(_ value: UInt, through waiter: Waiter, holding held: borrowing OnceCell.LockHeld) {
    OnceCell.publish(value, in: waiter.storage!, holding: held)
  }

  func unpark(_ parked: ParkedThread) { parked.parker.unpark() }

  func sendHop() { MainQueueEngine.sendHop(for: self) }

  func startTimer() { startStallTimer() }

  func tellStallEnded(since: UInt64, finished: Bool) {
    MainQueueEngine.observer?.reportedWaitEnded(self, finished: finished, waitingSince: since)
  }

  // Nothing reads a caller's attempt once it is out of the gate, and its thread reuses the
  // record only once woken. A stranded wait brought none: the interpreter's reference, dropped
  // right after this, is its last, and takes its handler with it.
  func letGo(_ waiter: Waiter) { waiter.attempt = nil }

  func resume(_ continuation: UnsafeContinuation<Resolution, Never>?, of waiter: Waiter) {
    continuation?.resume(returning: waiter.answer!)
  }
}

/// A thread parked in a wait: where it sleeps, and which thread it is.
struct ParkedThread {
  let parker: Parker
  let id: ThreadID
}

/// The thread running a gate's attempts, the call whose attempt runs, and since when.
struct Runner {
  let thread: ThreadID
  let site: CallSite
  let since: UInt64
}

/// How a caller's wait ended: an attempt succeeded (its own or another's); its own attempt
/// threw; or, for a task, it was cancelled before its attempt started.
enum Resolution {
  case done
  case failed(any Error)
  case cancelled

  /// The machine's verdict, with the error of the attempt that failed.
  init(_ verdict: Verdict, failure: (any Error)?) {
    switch verdict {
    case .done: self = .done
    case .failed: self = .failed(failure!)
    case .cancelled: self = .cancelled
    }
  }
}

/// One caller of a gate, with the attempt it brought and how to tell it the end.
final class Waiter: @unchecked Sendable {
  // This is safe because each field is reached in one way only, which keeps other threads out:
  // the call's own fields (`site` to `storage`) are written only when the record is made or
  // reused (``reuse(site:label:kind:attempt:storage:)``, on its thread, once nothing else
  // refers to it), a task's continuation only with the lock's proof, before it arrives, and the
  // attempt let go of only by whoever took the caller out of its gate (see `attempt`);
  // `gate`, `startedAt` and the answer are this file's, which writes them only with the lock's
  // proof in hand (the answer before the releasing store that sets `isResolved`), and reachable
  // elsewhere only through accessors that take that proof, or, for the answer, only after an
  // acquiring load finds `isResolved` set; `phase` and `link` are ``WaiterQueue``'s.

  /// How the caller learns its resolution (see ``Wakeup``): a parked thread is unparked; a
  /// suspended task (`nil` until it has suspended) is resumed; a completion-form call's handler
  /// is released to its queue, under the lock, so that handlers keep the order of the calls;
  /// main-context code that runs the queue itself reads its ``answer`` when it is done.
  typealias Kind = Wakeup<
    ParkedThread, UnsafeContinuation<Resolution, Never>?, @Sendable (Resolution) -> Void
  >

  private(set) var site: CallSite
  private(set) var label: CellLabel
  private(set) var since = Platform.monotonicNanoseconds()
  private(set) var kind: Kind
  /// The caller's attempt; `nil` once let go, and for a wait that never initializes. Only the
  /// runner reads it, while it runs; whoever takes the caller out of its gate lets go of it,
  /// after the lock (``Gate/letGo(_:)``), owning the caller until it wakes it.
  fileprivate(set) var attempt: Attempt?
  /// Whether the caller brought an attempt; `false` for a wait that never initializes.
  private(set) var bringsAttempt: Bool
  /// Whether the caller is a wait without an attempt that blocks the main queue, and runs the
  /// attempts queued for it meanwhile.
  private(set) var servesMainQueue = false
  /// The storage the caller borrows until it is resolved; `nil` for a completion-form call.
  /// Read only while the caller is not resolved, or by the gate that resolves it as done.
  private(set) var storage: UnsafePointer<_OnceWord>?
  /// The gate the caller queued in, until it is answered.
  fileprivate var gate: Gate?
  /// When its attempt started, while it runs.
  fileprivate var startedAt: UInt64 = 0
  /// How its wait ended: see ``answer``.
  fileprivate var resolution: Resolution?
  /// Whether the caller is answered: a releasing store after its answer was written.
  let isResolved = Atomic(false)
  /// Where the caller is in its wait: the machine's, through ``WaiterQueue``.
  // This is safe because only ``WaiterQueue`` reads and writes it, inside a gate's machine
  // (reachable only with the lock's proof); the dynamic check would only cost time.
  @exclusivity(unchecked) fileprivate var phase = CallerPhase.arriving
  /// The caller queued behind this one (see ``WaiterQueue``).
  // This is safe because only ``LinkedQueue`` reads and writes it, inside a gate's machine
  // (reachable only with the lock's proof) or in the effects that took the caller out of it,
  // which own it until they wake it.
  @exclusivity(unchecked) var link = QueueLink<Waiter>()

  /// A caller that brings an attempt (`nil` only for the placeholder for an in-place run, whose
  /// attempt runs already).
  init(
    site: CallSite, label: CellLabel, kind: Kind, attempt: Attempt?,
    storage: UnsafePointer<_OnceWord>?
  ) {
    self.site = site
    self.label = label
    self.kind = kind
    self.attempt = attempt
    self.storage = storage
    bringsAttempt = true
  }

  /// A wait that never initializes, for the cell labelled `label`: a blocked thread's, in main
  /// context if `servesMainQueue`, a task's, or a completion handler's (which borrows no
  /// `storage`).
  init(
    waitingAt site: CallSite, label: CellLabel, kind: Kind, servesMainQueue: Bool,
    storage: UnsafePointer<_OnceWord>?
  ) {
    self.site = site
    self.label = label
    self.kind = kind
    self.storage = storage
    bringsAttempt = false
    self.servesMainQueue = servesMainQueue
  }

  /// Where the caller is in its wait.
  func phase(holding _: borrowing OnceCell.LockHeld) -> CallerPhase { phase }

  /// The gate it queued in, until it is resolved.
  func gate(holding _: borrowing OnceCell.LockHeld) -> Gate? { gate }

  /// How the caller's wait ended, once it is answered (`nil` before): readable without the
  /// lock, on the caller's thread after its wake, or by whoever answered it.
  var answer: Resolution? { isResolved.load(ordering: .acquiring) ? resolution : nil }

  /// Records the task's continuation, holding the lock, before the caller arrives.
  func suspend(
    with continuation: UnsafeContinuation<Resolution, Never>, holding _: borrowing OnceCell.LockHeld
  ) {
    kind = .task(continuation)
  }

  /// Lets go of the attempt of a caller that found the cell done before it queued: on its own
  /// thread, since nothing else ever saw it.
  func dropUnqueuedAttempt() { attempt = nil }

  /// Makes a blocking caller's record, resolved and referred to by nothing but its thread,
  /// new again for that thread's next wait: what a fresh one would be. Only on the record's
  /// thread, once nothing else refers to it (``ThreadRecord/takeWaiter(site:label:kind:attempt:storage:)``
  /// checks it): whoever let go of it did so after its last access, and its release orders
  /// that access before the uniqueness check.
  func reuse(
    site: CallSite, label: CellLabel, kind: Kind, attempt: @escaping Attempt,
    storage: UnsafePointer<_OnceWord>
  ) {
    self.site = site
    self.label = label
    since = Platform.monotonicNanoseconds()
    self.kind = kind
    self.attempt = attempt
    self.storage = storage
    phase = .arriving
    startedAt = 0
    gate = nil
    link = QueueLink()
    resolution = nil
    isResolved.store(false, ordering: .relaxed)
  }
}

/// The callers of a gate, in arrival order: a list threaded through the waiters, so that
/// queueing one allocates nothing; each caller's phase is kept in its waiter. Under the lock.
typealias WaiterQueue = LinkedQueue<Waiter>

extension Waiter: QueueLinked {}

extension LinkedQueue: GateCallers where Element == Waiter {
  typealias Thread = ThreadID
  typealias Batch = WaiterQueue

  func phase(of waiter: Waiter) -> CallerPhase { waiter.phase }

  func setPhase(_ phase: CallerPhase, of waiter: Waiter) { waiter.phase = phase }

  func borrowsStorage(_ waiter: Waiter) -> Bool { waiter.storage != nil }
}
