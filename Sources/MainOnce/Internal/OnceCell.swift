public import Synchronization

// MARK: - A once-cell's storage and its flight
//
// A once-cell is what a token, a `MainLazy` or an object's `onceOnMain(for:)` call site keeps:
// one storage word (`_OnceWord`) and, while calls are in progress, a `Flight` attached to it.
// Its phases and transitions are the table of `FlightMachine.swift`, which the flight runs.
// Every entry point asks `OnceCell.phase()`, under `OnceCell.lock`, and switches on the
// answer: `.done(value)` or `.inFlight(flight)`; `phase()` attaches a flight to a fresh cell and
// publishes a finished one.
//
// Memory ordering: every store to a token's, a `MainLazy`'s or an object call site's word
// happens under `OnceCell.lock`, but for an in-place run's (a first call in main context that
// nobody joins): it marks the word, and ends its run, each with one compare-and-exchange that
// fails if a caller attached a flight meanwhile (with a compare-and-exchange, under the lock).
// Publishing is a releasing store or exchange made after the attempt returned; the fast path's
// load is acquiring, and so is every load under the lock that finds the cell done. So
// everything an initializer wrote happens before every return of a caller that saw the cell
// done. Flight and waiter fields are read and written only under the lock.
//
// Why "finished" exists: a flight never keeps the storage's address (a hop or a completion
// handler may outlive the token). Only a caller that borrows the storage writes the word: the
// caller of `phase()`, or a waiting blocking or `await` caller, borrowing until it is resolved.

/// The storage word of a once-cell (see the table at the top of this file).
///
/// Statically initialized: a `static let` holding one is a constant in the binary.
@usableFromInline
struct _OnceWord: ~Copyable, Sendable {
  @usableFromInline
  let word: Atomic<UInt>

  @inlinable
  init() {
    word = Atomic(1)
  }

  deinit {
    // Nothing borrows the storage any more, so nothing else reads or writes the word.
    Flight.releaseAttached(word.load(ordering: .relaxed))
  }

  /// The word, read with an acquiring load: even once done. The fast path of every call.
  @inlinable
  @inline(__always)
  var value: UInt { word.load(ordering: .acquiring) }

  /// Whether the cell is done: one acquiring load and a bit test.
  @inlinable
  @inline(__always)
  var isPublished: Bool { value & 1 == 0 }

  /// Whether the cell is done, also when it is *finished* and unpublished (which this publishes):
  /// one acquiring load when done, the lock otherwise.
  @inlinable
  var isDone: Bool { isPublished || _isDoneSlowPath() }

  @usableFromInline
  @inline(never)
  func _isDoneSlowPath() -> Bool {
    let word = address
    return OnceCell.withLock { OnceCell.doneValue(of: word, holding: $0) != nil }
  }

  /// The storage's address, for a caller that borrows it for as long as it uses the address.
  ///
  /// This is safe because of what a borrow of this type is, not because of `withUnsafePointer`,
  /// whose documentation promises the pointer only inside its closure. `_OnceWord` is
  /// `~Copyable`, so no copy of it can exist, and while it is borrowed it cannot be moved or
  /// consumed (the borrow excludes both). It stores an `Atomic`, which has raw layout
  /// (`@_rawLayout`): such a type, and every type that stores one, is address-only, so a borrow
  /// of it is passed as the address of the storage itself, which is the address that
  /// `withUnsafePointer(to:)` hands to its closure. The address therefore names the storage
  /// until the caller's borrow ends, the same property the standard library's `Atomic` and
  /// `Mutex` rest on when they operate on a borrowed `self`. The caller's side of it: use the
  /// address only while borrowing the storage, and let nothing that can outlive the borrow keep
  /// it (a flight never does; a waiter drops it when it is resolved).
  var address: UnsafePointer<_OnceWord> {
    withUnsafePointer(to: self) { $0 }
  }
}

/// A once-cell as one caller borrows it: the storage word and the cell's name in diagnostics.
/// Valid only for the caller's borrow; nothing that can outlive the call keeps one.
struct OnceCell {
  let word: UnsafePointer<_OnceWord>
  let label: CellLabel

  /// The lock that guards every flight and every store to a cell's word but an in-place run's:
  /// taken only through ``withLock(_:)``.
  private static let lock = Lock(rank: .onceCell)

  /// What proves that the caller holds ``lock``: only ``withLock(_:)`` makes one, and its body
  /// only borrows it, so no code outside the lock's scope can have one. Every method that reads
  /// or writes a flight's state, or stores to a word under the lock, takes one: an access to
  /// that state without the lock does not compile.
  struct Held: ~Copyable {
    fileprivate init() {}
  }

  /// Runs `body` holding the lock that guards every flight.
  static func withLock<Result, Failure: Error>(
    _ body: (borrowing Held) throws(Failure) -> Result
  ) throws(Failure) -> Result {
    try lock.withLock { () throws(Failure) -> Result in try body(Held()) }
  }

  /// The word of a cell whose attempt `thread` runs in place, in main context, without a
  /// flight: odd, so not done, and with bit 1 set, which a flight's tagged address (aligned to
  /// 16) never has.
  private static func inPlaceWord(of thread: ThreadID) -> UInt {
    UInt(UInt32(bitPattern: thread.rawValue)) << 2 | 0b11
  }

  /// The thread that runs the cell's attempt in place, if `raw` says one does.
  private static func inPlaceRunner(_ raw: UInt) -> ThreadID? {
    raw & 0b11 == 0b11
      ? ThreadID(rawValue: Int32(bitPattern: UInt32(truncatingIfNeeded: raw >> 2))) : nil
  }

  /// Marks the cell as running its attempt in place on `thread`, in main context, without a
  /// flight, if it is fresh; returns whether it did. Without the lock: one compare-and-exchange,
  /// against ``phase()``'s.
  func startInPlaceRun(on thread: ThreadID) -> Bool {
    word.pointee.word.compareExchange(
      expected: 1, desired: Self.inPlaceWord(of: thread), ordering: .acquiringAndReleasing
    ).exchanged
  }

  /// Whether `thread` runs the cell's attempt in place, without a flight. Without the lock:
  /// only `thread` stores its own mark, and only a flight taking the run over replaces it.
  func isRunInPlace(by thread: ThreadID) -> Bool {
    Self.inPlaceRunner(word.pointee.word.load(ordering: .relaxed)) == thread
  }

  /// Ends `thread`'s in-place run with `result`, unless a flight took it over: publishes a
  /// success with a releasing compare-and-exchange, or makes the cell fresh again after a
  /// failure. Returns `false` if callers arrived meanwhile and a flight took the run over
  /// (then ``takenOverRun(of:)`` says who stands in for it). Without the lock.
  func endInPlaceRun(by thread: ThreadID, with result: Result<UInt, any Error>) -> Bool {
    let end: UInt
    switch result {
    case .success(let value): end = value
    case .failure: end = 1
    }
    return word.pointee.word.compareExchange(
      expected: Self.inPlaceWord(of: thread), desired: end, ordering: .releasing
    ).exchanged
  }

  /// The flight that took over `thread`'s in-place run, and the caller that stands in for that
  /// run, whose end the flight records next. After ``endInPlaceRun(by:with:)`` returned
  /// `false`.
  func takenOverRun(of thread: ThreadID, holding held: borrowing Held) -> (Flight, Waiter) {
    let raw = word.pointee.word.load(ordering: .relaxed)
    guard let flight = Flight.attached(raw), let standIn = flight.running(holding: held) else {
      Diagnostics.internalInconsistency("\(label) changed while \(thread) ran it in place")
    }
    return (flight, standIn)
  }

  /// The cell's phase, as the callers see it.
  enum Phase {
    /// Done, with the published value.
    case done(UInt)
    /// In flight: fresh (a flight was attached just now), idle, queued or running.
    case inFlight(Flight)
  }

  /// The phase of the cell, while the caller borrows the storage. A *finished* cell is published
  /// here and reads as done; a fresh one gets a flight.
  func phase(holding held: borrowing Held) -> Phase {
    while true {
      // One load for every decision below: an in-place run may publish between two, and a
      // flight attached over a published word would run the initializer again.
      let raw = word.pointee.word.load(ordering: .acquiring)
      if let value = Self.doneValue(raw, in: word, holding: held) { return .done(value) }
      if let flight = Flight.attached(raw) { return .inFlight(flight) }
      let flight = Flight(label: label)
      let attached = flight.retainedForStorage()
      // The one store to the word that races with stores made without the lock: an in-place
      // run starting or ending. If one did, look again.
      guard
        word.pointee.word.compareExchange(
          expected: raw, desired: attached, ordering: .acquiringAndReleasing
        ).exchanged
      else {
        Flight.releaseAttached(attached)
        continue
      }
      // An attempt runs in place without a flight: the flight takes it over, with a caller that
      // stands in for the one running it, which borrows the storage until it returns. Nobody
      // sees the flight before the lock is released.
      if let runner = Self.inPlaceRunner(raw) {
        flight.adoptInPlaceRun(by: runner, in: word, holding: held)
      }
      return .inFlight(flight)
    }
  }

  /// The value of a done cell, publishing it first if it is *finished*; `nil` if it is not
  /// done. While the caller borrows the storage.
  static func doneValue(of word: UnsafePointer<_OnceWord>, holding held: borrowing Held) -> UInt? {
    // Acquiring: an in-place run publishes without the lock.
    doneValue(word.pointee.word.load(ordering: .acquiring), in: word, holding: held)
  }

  /// ``doneValue(of:)`` for `raw`, the word as the caller loaded it (acquiring).
  private static func doneValue(
    _ raw: UInt, in word: UnsafePointer<_OnceWord>, holding held: borrowing Held
  ) -> UInt? {
    if raw & 1 == 0 { return raw }
    guard let outcome = Flight.attached(raw)?.outcome(holding: held) else { return nil }
    publish(outcome, in: word, holding: held)
    return outcome
  }

  /// Stores `value` in the word with a releasing store, and lets go of the finished flight.
  /// By a caller that borrows the storage.
  static func publish(_ value: UInt, in word: UnsafePointer<_OnceWord>, holding _: borrowing Held) {
    let previous = word.pointee.word.load(ordering: .relaxed)
    word.pointee.word.store(value, ordering: .releasing)
    Flight.releaseAttached(previous)
  }
}

/// A caller's initializer, type-erased. It returns the value to publish (even).
typealias Attempt = () -> Result<UInt, any Error>

/// The calls in progress for one cell that is not done: its ``FlightMachine``, and what the
/// engine keeps beside it. It is the cell's identity while calls are in progress: the storage
/// retains it, and so does everything that refers to the cell from outside a borrow (a hop, a
/// waiter, the deadlock detector). An object cannot be reallocated while it is retained, so
/// nothing left over from one cell can act on another cell that reuses the storage's address.
final class Flight: @unchecked Sendable {
  // This is safe because its state, and the list of flights awaiting a hop, are reachable only
  // through methods that take proof that the caller holds the engine's lock (`OnceCell.Held`),
  // which also makes their accesses exclusive, so they skip the dynamic check; `label` never
  // changes, and `epoch` is an atomic.

  /// What the engine's lock guards.
  struct State {
    var machine = FlightMachine(callers: WaiterQueue())
    /// When the oldest caller had begun to wait, once a stall report about the flight was
    /// delivered: the report of its end says how long they waited.
    var reportedSince: UInt64?
    /// Set while a timer watches the flight for callers that do not block.
    var isTimed = false
  }

  let label: CellLabel
  @exclusivity(unchecked) private var state = State()
  /// Bumped whenever the runner changes: the deadlock detector checks that it did not change
  /// while it gathered evidence.
  let epoch = Atomic<UInt>(0)

  init(label: CellLabel) { self.label = label }

  /// Reads or changes the flight's state.
  func withState<Result>(
    holding _: borrowing OnceCell.Held, _ body: (inout State) -> Result
  ) -> Result {
    body(&state)
  }

  /// The value of the attempt that succeeded, once one has.
  func outcome(holding _: borrowing OnceCell.Held) -> UInt? { state.machine.outcome }
  /// The callers queued or running, in arrival order.
  func queue(holding _: borrowing OnceCell.Held) -> WaiterQueue { state.machine.callers }

  /// The thread in main context that runs the flight's attempts, and the attempt it runs.
  func runner(holding _: borrowing OnceCell.Held) -> Runner? {
    guard let thread = state.machine.runner, let owner = state.machine.running else { return nil }
    return Runner(thread: thread, site: owner.site, since: owner.startedAt)
  }

  /// Flights whose hop is on its way, and has not started: main-queue code that waits under the
  /// `service` policy runs them in place.
  @exclusivity(unchecked) nonisolated(unsafe) private static var awaitingHop: [Flight] = []

  /// The flights whose hop is on its way, and has not started.
  static func awaitingHop(holding _: borrowing OnceCell.Held) -> [Flight] { awaitingHop }

  /// ``FlightMachine/arrive(_:on:inMainContext:isCancelled:)``: queues `waiter` unless it is
  /// re-entrant or cancelled. A hop it must send is marked as on its way: send it once the lock
  /// is released.
  func arrive(
    _ waiter: Waiter, on thread: ThreadID?, inMainContext: Bool, isCancelled: Bool = false,
    holding _: borrowing OnceCell.Held
  ) -> Arrival<Waiter, ThreadID> {
    let arrival = transition {
      $0.arrive(waiter, on: thread, inMainContext: inMainContext, isCancelled: isCancelled)
    }
    switch arrival {
    case .cancelled, .reentrant: break
    case .wait(let sendsHop):
      waiter.flight = self
      if sendsHop { Self.awaitingHop.append(self) }
    case .drive, .runByAnotherThread: waiter.flight = self
    }
    return arrival
  }

  /// ``FlightMachine/mainQueueReached(on:isHop:)``.
  func mainQueueReached(
    on thread: ThreadID, isHop: Bool, holding _: borrowing OnceCell.Held
  ) -> HopStep<Waiter, ThreadID> {
    if isHop, let index = Self.awaitingHop.firstIndex(where: { $0 === self }) {
      Self.awaitingHop.remove(at: index)
    }
    return transition { $0.mainQueueReached(on: thread, isHop: isHop) }
  }

  /// ``FlightMachine/init(callers:adopting:runBy:)``: takes over an attempt that `thread` runs
  /// in place for the cell whose storage is `word`. The caller that stands in for the one
  /// running it is made here, by the thread that arrived (its site is that thread's, and never
  /// shown: a re-entrant call names the in-place call from its own thread's record).
  func adoptInPlaceRun(
    by thread: ThreadID, in word: UnsafePointer<_OnceWord>, holding _: borrowing OnceCell.Held
  ) {
    let standIn = Waiter(
      site: CallSite(file: "", line: 0), label: label, kind: .inPlace, attempt: nil,
      storage: word)
    standIn.flight = self
    transition { $0 = FlightMachine(callers: WaiterQueue(), adopting: standIn, runBy: thread) }
  }

  /// The caller whose attempt runs, if one does.
  func running(holding _: borrowing OnceCell.Held) -> Waiter? { state.machine.running }

  /// ``FlightMachine/startNextAttempt(on:)``.
  func startNextAttempt(on thread: ThreadID, holding _: borrowing OnceCell.Held) -> Waiter? {
    transition { $0.startNextAttempt(on: thread) }
  }

  /// ``FlightMachine/finish(_:with:resolve:)``: records the end of `owner`'s attempt, resolves
  /// the callers it ends, and publishes a success if a borrower waits.
  func finish(
    _ owner: Waiter, with result: Result<UInt, any Error>, into wakes: inout Wakes,
    holding held: borrowing OnceCell.Held
  ) {
    let value: UInt?
    var failure: (any Error)?
    switch result {
    case .success(let success): value = success
    case .failure(let error): (value, failure) = (nil, error)
    }
    let borrower = transition {
      $0.finish(owner, with: value) { wakes.resolve($0, Resolution($1, failure: failure)) }
    }
    // Published last: a caller that finds the word done on the fast path submits its
    // completion handler after every queued one. The borrower is resolved but not yet woken,
    // so its storage is still in place.
    if let value, let storage = borrower?.storage {
      OnceCell.publish(value, in: storage, holding: held)
    }
  }

  /// ``FlightMachine/cancel(_:resolve:)``: takes a task's waiter out of the queue after its
  /// task was cancelled, unless its attempt has started or it is resolved already.
  func cancel(_ waiter: Waiter, into wakes: inout Wakes, holding _: borrowing OnceCell.Held) {
    transition { $0.cancel(waiter) { wakes.resolve($0, Resolution($1, failure: nil)) } }
    // Nobody is left to watch for: the next caller that does not block starts a timer again.
    if state.machine.callers.isEmpty { state.isTimed = false }
  }

  /// Applies one transition of the machine, then what the engine keeps beside it: the
  /// detector's epoch, when the attempt that runs started; and checks the machine's invariant,
  /// in release builds too: queued callers without a runner or a hop would wait for ever.
  /// Called only by the methods above, which take proof that the caller holds the lock.
  private func transition<Result>(_ body: (inout FlightMachine<WaiterQueue>) -> Result) -> Result {
    let (runner, running) = (state.machine.runner, state.machine.running)
    let result = body(&state.machine)
    if state.machine.runner != runner { epoch.add(1, ordering: .releasing) }
    if let owner = state.machine.running, owner !== running {
      owner.startedAt = Platform.monotonicNanoseconds()
    }
    guard state.machine.invariantHolds else {
      Diagnostics.internalInconsistency(
        "callers wait for \(label), which nobody runs and no hop will reach")
    }
    return result
  }

  // MARK: Retained by the storage

  /// The flight whose tagged address is `raw`, if it is one. Call under the lock.
  static func attached(_ raw: UInt) -> Flight? {
    reference(raw)?.takeUnretainedValue()
  }

  /// A +1 reference for the storage to hold, tagged as not done.
  func retainedForStorage() -> UInt {
    UInt(bitPattern: Unmanaged.passRetained(self).toOpaque()) | 1
  }

  /// Gives back the storage's reference, if `raw` is a flight's.
  static func releaseAttached(_ raw: UInt) {
    reference(raw)?.release()
  }

  private static func reference(_ raw: UInt) -> Unmanaged<Flight>? {
    guard raw & 0b11 == 1, let pointer = UnsafeRawPointer(bitPattern: raw & ~1) else { return nil }
    return Unmanaged<Flight>.fromOpaque(pointer)
  }
}

/// The thread running a flight's attempts, the call whose attempt runs, and since when.
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

/// One caller of a flight, with the attempt it brought and how to tell it the end.
final class Waiter: @unchecked Sendable {
  // This is safe because the variables are only read and written under `OnceCell.lock`, but
  // for the reads after it: `resolution`, which is written once under the lock before the
  // caller is told and read by the caller after it is told (through the lock, the parking's
  // semaphore or the continuation, each of which orders the two); `kind` and `resolution`,
  // which `Wakes.deliver` reads after the lock is released, on the thread that resolved the
  // caller under it (neither is written again once the caller is resolved); `isResolved`, an
  // atomic; and every field written by ``reuse(site:label:kind:attempt:storage:)``, which runs
  // only on the thread that owns the record, when nothing else refers to it any more (see
  // ``ThreadRecord/takeWaiter(site:label:kind:attempt:storage:)``).

  /// How the caller learns its resolution: a parked thread is signalled; a suspended task
  /// (`nil` until it has suspended) is resumed; a completion-form call's handler is submitted to
  /// its queue, under the lock, so that handlers keep the order of the calls; main-context code
  /// that runs the queue itself reads ``resolution`` when it is done.
  enum Kind {
    case thread(Parking, ThreadID)
    case task(UnsafeContinuation<Resolution, Never>?)
    case handler(@Sendable (Resolution) -> Void)
    case inPlace
  }

  @exclusivity(unchecked) private(set) var site: CallSite
  @exclusivity(unchecked) private(set) var label: CellLabel
  @exclusivity(unchecked) private(set) var since = Platform.monotonicNanoseconds()
  @exclusivity(unchecked) var kind: Kind
  /// The caller's attempt; `nil` once resolved.
  @exclusivity(unchecked) var attempt: Attempt?
  /// The storage the caller borrows until it is resolved; `nil` for a completion-form call.
  /// Read only while the caller is not resolved, or by the flight that resolves it as done.
  @exclusivity(unchecked) private(set) var storage: UnsafePointer<_OnceWord>?
  /// Where the caller is in its wait: the machine's, through ``WaiterQueue``.
  @exclusivity(unchecked) var phase = CallerPhase.arriving
  /// When its attempt started, while it runs.
  @exclusivity(unchecked) var startedAt: UInt64 = 0
  /// The flight it queued in, until it is resolved.
  @exclusivity(unchecked) var flight: Flight?
  /// The caller queued behind this one (see ``WaiterQueue``).
  @exclusivity(unchecked) var next: Waiter?
  @exclusivity(unchecked) var resolution: Resolution?
  /// Whether ``resolution`` is set, read without the lock (by the deadlock detector).
  let isResolved = Atomic(false)

  init(
    site: CallSite, label: CellLabel, kind: Kind, attempt: Attempt?,
    storage: UnsafePointer<_OnceWord>?
  ) {
    self.site = site
    self.label = label
    self.kind = kind
    self.attempt = attempt
    self.storage = storage
  }

  /// Makes a blocking caller's record, resolved and referred to by nothing but its thread,
  /// new again for that thread's next wait: what a fresh one would be.
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
    flight = nil
    next = nil
    resolution = nil
    isResolved.store(false, ordering: .relaxed)
  }
}

/// Resolutions decided under the lock, delivered once it is released. The first waiter to wake
/// is kept inline (a first call wakes one), the others in an array.
struct Wakes {
  private var first: Waiter?
  private var others: [Waiter] = []

  /// Resolves `waiter`. Under the lock: from here on nothing runs its attempt, and a
  /// completion handler is submitted right away, in order.
  mutating func resolve(_ waiter: Waiter, _ resolution: Resolution) {
    waiter.attempt = nil
    waiter.flight = nil
    waiter.resolution = resolution
    waiter.isResolved.store(true, ordering: .releasing)
    switch waiter.kind {
    case .handler(let submit): submit(resolution)
    case .inPlace: break
    case .thread, .task:
      if first == nil { first = waiter } else { others.append(waiter) }
    }
  }

  /// Wakes the parked threads and resumes the tasks. After the lock is released.
  func deliver() {
    func wake(_ waiter: Waiter) {
      switch waiter.kind {
      case .thread(let parking, _): parking.unpark()
      case .task(let continuation): continuation?.resume(returning: waiter.resolution!)
      case .handler, .inPlace: break
      }
    }
    if let first { wake(first) }
    others.forEach(wake)
  }
}
