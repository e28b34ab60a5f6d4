#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Musl)
  internal import Musl
#elseif canImport(Darwin)
  internal import Darwin
#endif

/// State guarded by a `pthread_mutex_t`.
///
/// MainOnce does not use `Synchronization.Mutex` here: on Linux its futex is invisible to
/// ThreadSanitizer, which then reports every access it guards as a data race (measured with
/// Swift 6.3.1). TSan intercepts `pthread_mutex_lock`, so `swift test --sanitize=thread` sees
/// the happens-before edges this lock creates.
final class Locked<State>: @unchecked Sendable {
  // This is safe because `state` is only read or written between `pthread_mutex_lock` and
  // `pthread_mutex_unlock` on `mutex`, in `withLock`.
  private let mutex: UnsafeMutablePointer<pthread_mutex_t>
  // Unchecked: the mutex already makes every access exclusive.
  @exclusivity(unchecked) private var state: State

  init(_ state: State) {
    self.state = state
    mutex = .allocate(capacity: 1)
    mutex.initialize(to: pthread_mutex_t())
    pthread_mutex_init(mutex, nil)
  }

  deinit {
    pthread_mutex_destroy(mutex)
    mutex.deallocate()
  }

  func withLock<Result, Failure: Error>(
    _ body: (inout State) throws(Failure) -> Result
  ) throws(Failure) -> Result {
    pthread_mutex_lock(mutex)
    defer { pthread_mutex_unlock(mutex) }
    return try body(&state)
  }
}
