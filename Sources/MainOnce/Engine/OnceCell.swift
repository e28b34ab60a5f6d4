public import Synchronization

// MARK: - A once-cell's storage word
//
// A once-cell is what a token, a `MainLazy` or an object's `onceOnMain(for:)` call site keeps:
// one storage word (`_OnceWord`) and, while calls are in progress, a `Gate` attached to it
// (`Gate.swift`). Its phases and transitions are the table of `GateMachine.swift`, which the
// gate runs. Every entry point asks `OnceCell.phase(holding:)`, under the engine's lock
// (`OnceCell.withLock`), and switches on the
// answer: `.done(value)` or `.pending(gate)`; `phase()` attaches a gate to a fresh cell and
// publishes a finished one.
//
// Memory ordering: every store to a token's, a `MainLazy`'s or an object call site's word
// happens under `OnceCell.lock`, but for an in-place run's (a first call in main context that
// nobody joins): it marks the word, and ends its run, each with one compare-and-exchange that
// fails if a caller attached a gate meanwhile (with a compare-and-exchange, under the lock).
// Publishing is a releasing store or exchange made after the attempt returned; the fast path's
// load is acquiring, and so is every load under the lock that finds the cell done. So
// everything an initializer wrote happens before every return of a caller that saw the cell
// done. Gate and waiter fields are read and written only under the lock: those that must be
// are reachable only with its proof, `OnceCell.LockHeld`.
//
// Why "finished" exists: a gate never keeps the storage's address (a hop or a completion
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
    Gate.storageFreed(word.load(ordering: .relaxed))
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
  /// it (a gate never does; a waiter drops it when it is resolved).
  var address: UnsafePointer<_OnceWord> {
    withUnsafePointer(to: self) { $0 }
  }
}

/// A once-cell as one caller borrows it: the storage word and the cell's name in diagnostics.
/// Valid only for the caller's borrow; nothing that can outlive the call keeps one.
struct OnceCell {
  let word: UnsafePointer<_OnceWord>
  let label: CellLabel

  /// The lock that guards every gate and every store to a cell's word but an in-place run's:
  /// taken only through ``withLock(_:)``.
  private static let lock = Lock(rank: .onceCell)

  /// What proves that the caller holds ``lock``: only ``withLock(_:)`` makes one, and its body
  /// only borrows it, so no code outside the lock's scope can have one. Every method that reads
  /// or writes a gate's state, or stores to a word under the lock, takes one: an access to
  /// that state without the lock does not compile.
  struct LockHeld: ~Copyable {
    fileprivate init() {}
  }

  /// Runs `body` holding the lock that guards every gate.
  static func withLock<Result, Failure: Error>(
    _ body: (borrowing LockHeld) throws(Failure) -> Result
  ) throws(Failure) -> Result {
    try lock.withLock { () throws(Failure) -> Result in try body(LockHeld()) }
  }

  /// The word of a cell whose attempt `thread` runs in place, in main context, without a
  /// gate: odd, so not done, and with bit 1 set, which a gate's tagged address (aligned to
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
  /// gate, if it is fresh; returns whether it did. Without the lock: one compare-and-exchange,
  /// against ``phase()``'s.
  func startInPlaceRun(on thread: ThreadID) -> Bool {
    word.pointee.word.compareExchange(
      expected: 1, desired: Self.inPlaceWord(of: thread), ordering: .acquiringAndReleasing
    ).exchanged
  }

  /// Whether `thread` runs the cell's attempt in place, without a gate. Without the lock:
  /// only `thread` stores its own mark, and only a gate taking the run over replaces it.
  func isRunInPlace(by thread: ThreadID) -> Bool {
    Self.inPlaceRunner(word.pointee.word.load(ordering: .relaxed)) == thread
  }

  /// Ends `thread`'s in-place run with `result`, unless a gate took it over: publishes a
  /// success with a releasing compare-and-exchange, or makes the cell fresh again after a
  /// failure. Returns `false` if callers arrived meanwhile and a gate took the run over
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

  /// The gate that took over `thread`'s in-place run, and the caller that stands in for that
  /// run, whose end the gate records next. After ``endInPlaceRun(by:with:)`` returned
  /// `false`.
  func takenOverRun(of thread: ThreadID, holding held: borrowing LockHeld) -> (Gate, Waiter) {
    let raw = word.pointee.word.load(ordering: .relaxed)
    guard let gate = Gate.attached(raw, holding: held),
      let standIn = gate.running(holding: held)
    else {
      Diagnostics.internalInconsistency("\(label) changed while \(thread) ran it in place")
    }
    return (gate, standIn)
  }

  /// The cell's phase, as the callers see it.
  enum Phase {
    /// Done, with the published value.
    case done(UInt)
    /// In gate: fresh (a gate was attached just now), idle, queued or running.
    case pending(Gate)
  }

  /// The phase of the cell, while the caller borrows the storage. A *finished* cell is published
  /// here and reads as done; a fresh one gets a gate.
  func phase(holding held: borrowing LockHeld) -> Phase {
    while true {
      // One load for every decision below: an in-place run may publish between two, and a
      // gate attached over a published word would run the initializer again.
      let raw = word.pointee.word.load(ordering: .acquiring)
      if let value = Self.doneValue(raw, in: word, holding: held) { return .done(value) }
      if let gate = Gate.attached(raw, holding: held) { return .pending(gate) }
      let gate = Gate(label: label)
      let attached = gate.retainedForStorage()
      // The one store to the word that races with stores made without the lock: an in-place
      // run starting or ending. If one did, look again.
      guard
        word.pointee.word.compareExchange(
          expected: raw, desired: attached, ordering: .acquiringAndReleasing
        ).exchanged
      else {
        Gate.releaseAttached(attached)
        continue
      }
      // An attempt runs in place without a gate: the gate takes it over, with a caller that
      // stands in for the one running it, which borrows the storage until it returns. Nobody
      // sees the gate before the lock is released.
      if let runner = Self.inPlaceRunner(raw) {
        gate.adoptInPlaceRun(by: runner, in: word, holding: held)
      }
      return .pending(gate)
    }
  }

  /// The value of a done cell, publishing it first if it is *finished*; `nil` if it is not
  /// done. While the caller borrows the storage.
  static func doneValue(of word: UnsafePointer<_OnceWord>, holding held: borrowing LockHeld)
    -> UInt?
  {
    // Acquiring: an in-place run publishes without the lock.
    doneValue(word.pointee.word.load(ordering: .acquiring), in: word, holding: held)
  }

  /// ``doneValue(of:)`` for `raw`, the word as the caller loaded it (acquiring).
  private static func doneValue(
    _ raw: UInt, in word: UnsafePointer<_OnceWord>, holding held: borrowing LockHeld
  ) -> UInt? {
    if raw & 1 == 0 { return raw }
    guard let outcome = Gate.attached(raw, holding: held)?.outcome(holding: held) else {
      return nil
    }
    publish(outcome, in: word, holding: held)
    return outcome
  }

  /// Stores `value` in the word with a releasing store, and lets go of the finished gate.
  /// By a caller that borrows the storage.
  static func publish(
    _ value: UInt, in word: UnsafePointer<_OnceWord>, holding _: borrowing LockHeld
  ) {
    let previous = word.pointee.word.load(ordering: .relaxed)
    word.pointee.word.store(value, ordering: .releasing)
    Gate.releaseAttached(previous)
  }
}

/// A caller's initializer, type-erased. It returns the value to publish (even).
typealias Attempt = () -> Result<UInt, any Error>
