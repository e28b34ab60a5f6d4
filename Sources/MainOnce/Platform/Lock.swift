internal import _CMainOnceShims

#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Musl)
  internal import Musl
#elseif canImport(Darwin)
  internal import Darwin
#endif

/// A `pthread_mutex_t`.
///
/// MainOnce does not use `Synchronization.Mutex`: on Linux its futex is invisible to
/// ThreadSanitizer, which then reports every access it guards as a data race (measured with
/// Swift 6.3.1). TSan intercepts `pthread_mutex_lock`, so `swift test --sanitize=thread` sees the
/// happens-before edges this lock creates. Every return code is checked: a failure means the
/// mutex is corrupt or used wrongly, and MainOnce stops rather than go on unguarded.
final class Lock: @unchecked Sendable {
  // This is safe because the mutex is only used through pthread calls, which synchronize.
  private let mutex: UnsafeMutablePointer<pthread_mutex_t>
  let rank: LockRank

  init(rank: LockRank) {
    self.rank = rank
    mutex = .allocate(capacity: 1)
    mutex.initialize(to: pthread_mutex_t())
    #if os(Linux)
      // Adaptive: a thread that finds the lock taken spins a little before it sleeps. Every
      // critical section here is a few hundred instructions, so when racing callers meet, the
      // lock is usually free again before a futex sleep and wake-up would be over.
      var attributes = pthread_mutexattr_t()
      Self.check(pthread_mutexattr_init(&attributes), "pthread_mutexattr_init")
      Self.check(
        pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ADAPTIVE_NP)),
        "pthread_mutexattr_settype")
      Self.check(pthread_mutex_init(mutex, &attributes), "pthread_mutex_init")
      Self.check(pthread_mutexattr_destroy(&attributes), "pthread_mutexattr_destroy")
    #else
      Self.check(pthread_mutex_init(mutex, nil), "pthread_mutex_init")
    #endif
  }

  deinit {
    Self.check(pthread_mutex_destroy(mutex), "pthread_mutex_destroy")
    mutex.deallocate()
  }

  func withLock<Result, Failure: Error>(
    _ body: () throws(Failure) -> Result
  ) throws(Failure) -> Result {
    #if DEBUG
      rank.willLock()
      defer { rank.didUnlock() }
    #endif
    Self.check(pthread_mutex_lock(mutex), "pthread_mutex_lock")
    defer { Self.check(pthread_mutex_unlock(mutex), "pthread_mutex_unlock") }
    return try body()
  }

  private static func check(_ status: Int32, _ call: StaticString) {
    if status != 0 { Diagnostics.internalInconsistency("\(call) failed with \(status)") }
  }
}

/// State guarded by a ``Lock``: reachable only inside ``withLock(_:)``.
final class Locked<State> {
  private let lock: Lock
  // This is safe because it is reached only inside `lock.withLock`, which makes every access
  // exclusive.
  @exclusivity(unchecked) private var state: State

  /// State guarded by a lock of its own, of rank `rank` (by default a leaf: one that is never
  /// held while another lock is taken).
  init(_ state: State, rank: LockRank = .leaf) {
    self.state = state
    lock = Lock(rank: rank)
  }

  func withLock<Result, Failure: Error>(
    _ body: (inout State) throws(Failure) -> Result
  ) throws(Failure) -> Result {
    try lock.withLock { () throws(Failure) -> Result in try body(&state) }
  }
}

// This is safe because `state` is only read or written inside `lock.withLock`, so no two threads
// touch it at once, and each sees every write made before the lock was last released; and
// because only a `Sendable` state may be reached from several threads this way: a state that
// is not `Sendable` (one holding a non-`Sendable` reference, say) would let two threads use the
// object it refers to outside the lock.
extension Locked: @unchecked Sendable where State: Sendable {}

/// State reachable only inside the scope of the lock that guards it: swift-nio's
/// `NIOLockedValueBox`, for a lock that guards many such values at once (every gate's, every
/// build's), and so is taken once, outside them. The value is reached only with the lock's
/// proof, `Proof`: a noncopyable value that only that lock's `withLock` makes, and only lends to
/// its body, so no code outside the lock's scope can have one. Without it there is no way to the
/// value: an access without the lock does not compile.
struct Guarded<Value, Proof: ~Copyable> {
  private var value: Value

  init(_ value: Value) { self.value = value }

  /// The value, for a caller that holds the lock: `proof` says so.
  func read(_ proof: borrowing Proof) -> Value { value }

  /// Reads or changes the value in `body`, for a caller that holds the lock: `proof` says so.
  mutating func modify<Result>(
    _ proof: borrowing Proof, _ body: (inout Value) throws -> Result
  ) rethrows -> Result {
    try body(&value)
  }
}

extension Guarded: Sendable where Value: Sendable {}

/// The order in which a thread may take MainOnce's locks: while it holds one, only locks of a
/// higher rank. In debug builds every lock checks it, from a thread-local mask of the ranks the
/// thread holds, so that any path that takes two locks in the other order stops the tests with a
/// message naming both, whether or not two threads ever meet there; release builds check
/// nothing. (ThreadSanitizer cannot do this here: the toolchain's TSan v3 reports no lock-order
/// inversion of two `pthread_mutex_t`s, measured with a C program built with
/// `-fsanitize=thread`.)
enum LockRank: UInt32, CaseIterable {
  /// ``WaitBoard``'s lock, held while the deadlock detector reads every published wait (and asks
  /// each for its blockers, under its cell's lock).
  case waitBoard
  /// ``ObjectCells``'s table of per-object cells.
  case objectCells
  /// ``OnceCell/lock``: every main-queue gate.
  case onceCell
  /// ``RunOnceCell/lock``: every `runOnce(for:)` run.
  case runOnceCell
  /// ``AsyncBuild/lock``: every `AsyncMainLazy` build.
  case asyncBuild
  /// A lock that is never held while another is taken.
  case leaf

  #if DEBUG
    /// Records that the calling thread takes a lock of this rank, after checking the order.
    func willLock() {
      let held = mainonce_held_lock_ranks()
      let bit = UInt32(1) << rawValue
      if held >= bit {
        let holding = Self.allCases.filter { held & (1 << $0.rawValue) != 0 }
        Diagnostics.internalInconsistency(
          "lock order: taking the \(self) lock while holding \(holding.map { "\($0)" })")
      }
      mainonce_set_held_lock_ranks(held | bit)
    }

    /// Records that the calling thread let go of its lock of this rank.
    func didUnlock() {
      mainonce_set_held_lock_ranks(mainonce_held_lock_ranks() & ~(UInt32(1) << rawValue))
    }
  #endif
}
