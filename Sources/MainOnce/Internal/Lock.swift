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

  init() {
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
  private let lock = Lock()
  // Unchecked: the lock already makes every access exclusive.
  @exclusivity(unchecked) private var state: State

  init(_ state: State) {
    self.state = state
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
