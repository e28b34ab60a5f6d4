public import Synchronization

// MARK: - The states of a once-cell
//
// A once-cell is what a token, a `MainLazy` or an object's `onceOnMain(for:)` call site keeps:
// one storage word (`_OnceWord`) and, while calls are in progress, a `Flight` attached to it.
// This file owns both. Every entry point asks `OnceCell.phase()`, under `OnceCell.lock`, and
// switches on the answer: `.done(value)` or `.inFlight(flight)`.
//
// | Phase    | word      | flight.outcome | .runner | .queue    | .hopIsOnItsWay |
// | -------- | --------- | -------------- | ------- | --------- | -------------- |
// | fresh    | 1         | (no flight)    |         |           |                |
// | idle     | F | 1     | nil            | nil     | empty     | either         |
// | queued   | F | 1     | nil            | nil     | not empty | true           |
// | running  | F | 1     | nil            | a thread| any       | either         |
// | finished | F | 1     | the value      | nil     | empty     | either         |
// | done     | the value | (released)     |         |           |                |
//
// Transitions, each in one function, under the lock:
// - fresh → idle: `phase()` attaches a flight. idle → queued: `Flight.enqueue` and `claimHop`
//   (a caller outside main context sends the hop). idle or queued → running:
//   `startNextAttempt`, by the hop or by main-context code, which then drives the queue.
// - running → running: `finish` with a failure (the error goes to its caller; the runner goes
//   on with the next attempt). running → idle: `startNextAttempt` finds nothing left.
// - running → done: `finish` with a success, when any waiting caller borrows the storage (it
//   publishes through that caller's address). running → finished: the same with no borrower
//   (only completion-form callers waited). finished → done: the next `phase()` publishes.
// - queued → idle: `withdraw`, a cancelled task's caller leaving.
//
// `F` is the flight's address, with its low bit set: a done word is even (0 for a token or a
// call site, the built value's address for a `MainLazy`), so the fast path is one load and one
// bit test. Invariant, checked after every transition (`Flight.checkInvariant`): a flight with
// queued callers has a runner or a hop on its way, or has finished; callers outside main
// context never run an attempt, and would otherwise wait for ever.
//
// Memory ordering: every store to the word happens under the lock. Publishing is a releasing
// store made after the attempt returned (its end is recorded under the same lock); the fast
// path's load is acquiring. So everything an initializer wrote happens before every return of a
// caller that saw the cell done. Flight fields are read and written only under the lock.
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
    return OnceCell.lock.withLock { OnceCell.doneValue(of: word) != nil }
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

  /// The lock that guards every flight and every store to a cell's word.
  static let lock = Lock()

  /// The cell's phase, as the callers see it.
  enum Phase {
    /// Done, with the published value.
    case done(UInt)
    /// In flight: fresh (a flight was attached just now), idle, queued or running.
    case inFlight(Flight)
  }

  /// The phase of the cell; under ``lock``, while the caller borrows the storage. A *finished*
  /// cell is published here and reads as done; a fresh one gets a flight.
  func phase() -> Phase {
    if let value = Self.doneValue(of: word) { return .done(value) }
    let raw = word.pointee.word.load(ordering: .relaxed)
    if let flight = Flight.attached(raw) { return .inFlight(flight) }
    let flight = Flight(label: label)
    word.pointee.word.store(flight.retainedForStorage(), ordering: .relaxed)
    return .inFlight(flight)
  }

  /// The value of a done cell, publishing it first if it is *finished*; `nil` if it is not
  /// done. Under ``lock``, while the caller borrows the storage.
  static func doneValue(of word: UnsafePointer<_OnceWord>) -> UInt? {
    let raw = word.pointee.word.load(ordering: .relaxed)
    if raw & 1 == 0 { return raw }
    guard let outcome = Flight.attached(raw)?.outcome else { return nil }
    publish(outcome, in: word)
    return outcome
  }

  /// Stores `value` in the word with a releasing store, and lets go of the finished flight.
  /// Under the lock, by a caller that borrows the storage.
  static func publish(_ value: UInt, in word: UnsafePointer<_OnceWord>) {
    let previous = word.pointee.word.load(ordering: .relaxed)
    word.pointee.word.store(value, ordering: .releasing)
    Flight.releaseAttached(previous)
  }
}

/// A caller's initializer, type-erased. It returns the value to publish (even).
typealias Attempt = () -> Result<UInt, any Error>

/// The calls in progress for one cell that is not done (see the table above). It is the cell's
/// identity while calls are in progress: the storage retains it, and so does everything that
/// refers to the cell from outside a borrow (a hop, a waiter, the deadlock detector). An object
/// cannot be reallocated while it is retained, so nothing left over from one cell can act on
/// another cell that reuses the storage's address.
final class Flight: @unchecked Sendable {
  // This is safe because the variables are only read and written under `OnceCell.lock`, which
  // also makes their accesses exclusive, so they skip the dynamic check.

  let label: CellLabel
  /// The value of the attempt that succeeded, once one has: then it runs nothing again.
  @exclusivity(unchecked) var outcome: UInt?
  /// The thread in main context that runs the queued attempts, one after another.
  @exclusivity(unchecked) var runner: Runner?
  /// Callers waiting, in arrival order, each with its own attempt.
  @exclusivity(unchecked) var queue = WaiterQueue()
  @exclusivity(unchecked) var hopIsOnItsWay = false
  /// Bumped whenever the runner changes: the deadlock detector checks that it did not change
  /// while it gathered evidence.
  let epoch = Atomic<UInt>(0)
  /// When the oldest caller had begun to wait, once a stall report about the flight was
  /// delivered: the report of its end says how long they waited.
  @exclusivity(unchecked) var reportedSince: UInt64?
  /// Set while a timer watches the flight for callers that do not block.
  @exclusivity(unchecked) var isTimed = false

  init(label: CellLabel) { self.label = label }

  /// Queues `waiter` behind the callers already waiting.
  func enqueue(_ waiter: Waiter) {
    waiter.flight = self
    queue.append(waiter)
  }

  /// Whether the caller that just queued must send a hop: nobody runs the flight and no hop is on
  /// its way. Marks the hop as on its way; send it once the lock is released.
  func claimHop() -> Bool {
    defer { checkInvariant() }
    guard runner == nil, !hopIsOnItsWay, !queue.isEmpty else { return false }
    hopIsOnItsWay = true
    MainQueueEngine.awaitingHop.append(self)
    return true
  }

  /// Makes `thread` the runner and returns the first queued caller, whose attempt it runs next;
  /// `nil`, and no runner, once the flight has finished or nobody is left.
  func startNextAttempt(on thread: ThreadID) -> Waiter? {
    defer { checkInvariant() }
    guard outcome == nil, let owner = queue.first(where: { !$0.isRunning }) else {
      if runner != nil { epoch.add(1, ordering: .releasing) }
      runner = nil
      return nil
    }
    owner.isRunning = true
    if runner?.thread != thread { epoch.add(1, ordering: .releasing) }
    runner = Runner(thread: thread, site: owner.site)
    return owner
  }

  /// Records the end of `owner`'s attempt. On success the flight is finished, published if a
  /// borrower waits, and every caller is resolved as done; on failure the error goes to `owner`
  /// alone, and the runner goes on with the queue.
  func finish(_ owner: Waiter, with result: Result<UInt, any Error>, into wakes: inout Wakes) {
    queue.remove(owner)
    switch result {
    case .success(let value):
      let storage = owner.storage ?? queue.lazy.compactMap(\.storage).first
      outcome = value
      runner = nil
      epoch.add(1, ordering: .releasing)
      wakes.resolve(owner, .done)
      for waiter in queue { wakes.resolve(waiter, .done) }
      queue.removeAll()
      // Published last: a caller that finds the word done on the fast path submits its
      // completion handler after every queued one. The borrower is resolved but not yet woken,
      // so its storage is still in place.
      if let storage { OnceCell.publish(value, in: storage) }
    case .failure(let error):
      wakes.resolve(owner, .failed(error))
    }
  }

  /// Takes a task's waiter out of the queue after its task was cancelled, unless its attempt
  /// has started or it is resolved already.
  func withdraw(_ waiter: Waiter, into wakes: inout Wakes) {
    guard waiter.resolution == nil, !waiter.isRunning else { return }
    queue.remove(waiter)
    wakes.resolve(waiter, .cancelled)
    // Nobody is left to watch for: the next caller that does not block starts a timer again.
    if queue.isEmpty { isTimed = false }
    checkInvariant()
  }

  /// Stops the process if a flight with queued callers has neither a runner nor a hop on its
  /// way: those callers would wait for ever.
  func checkInvariant() {
    guard outcome != nil || queue.isEmpty || runner != nil || hopIsOnItsWay else {
      Diagnostics.internalInconsistency(
        "callers wait for \(label), which nobody runs and no hop will reach")
    }
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
    guard raw & 1 == 1, let pointer = UnsafeRawPointer(bitPattern: raw & ~1) else { return nil }
    return Unmanaged<Flight>.fromOpaque(pointer)
  }
}

/// The thread running a flight's attempts, and the call whose attempt it started with.
struct Runner {
  let thread: ThreadID
  let site: CallSite
  let since = Platform.monotonicNanoseconds()
}

/// How a caller's wait ended: an attempt succeeded (its own or another's); its own attempt
/// threw; or, for a task, it was cancelled before its attempt started.
enum Resolution {
  case done
  case failed(any Error)
  case cancelled
}

/// One caller of a flight, with the attempt it brought and how to tell it the end.
final class Waiter: @unchecked Sendable {
  // This is safe because the variables are only read and written under `OnceCell.lock`, but
  // for three reads after it: `resolution`, which is written once under the lock before the
  // caller is told and read by the caller after it is told (through the lock, the parking's
  // semaphore or the continuation, each of which orders the two); `kind` and `resolution`,
  // which `Wakes.deliver` reads after the lock is released, on the thread that resolved the
  // caller under it (neither is written again once the caller is resolved); and `isResolved`,
  // an atomic.

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

  let site: CallSite
  let label: CellLabel
  let since = Platform.monotonicNanoseconds()
  @exclusivity(unchecked) var kind: Kind
  /// The caller's attempt; `nil` once resolved.
  @exclusivity(unchecked) var attempt: Attempt?
  /// The storage the caller borrows until it is resolved; `nil` for a completion-form call.
  @exclusivity(unchecked) var storage: UnsafePointer<_OnceWord>?
  /// Set while the caller's attempt runs: from then on it waits for that attempt's result.
  @exclusivity(unchecked) var isRunning = false
  /// Set when a task's caller is cancelled before it has queued: it never will.
  @exclusivity(unchecked) var isWithdrawn = false
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
    waiter.isRunning = false
    waiter.storage = nil
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
