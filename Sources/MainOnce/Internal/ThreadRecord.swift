internal import Dispatch

#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Musl)
  internal import Musl
#elseif canImport(Darwin)
  internal import Darwin
#endif

/// What MainOnce keeps about one thread, made the first time the thread takes a slow path.
final class ThreadRecord: @unchecked Sendable {
  // This is safe because `id` and `isMainThread` never change, and `mainContextDepth` and
  // `spareParking` are only read and written by the thread this record belongs to; that also
  // makes their accesses exclusive, so they skip the dynamic check.

  /// The kernel thread id, read once: `gettid()` is a system call.
  let id: ThreadID

  /// Whether this is the process's main thread (tid == pid).
  let isMainThread: Bool

  /// How many main-queue attempts this thread is running right now. They run in main context,
  /// so a non-zero depth proves main context where libdispatch's queue state cannot be read.
  @exclusivity(unchecked) var mainContextDepth = 0

  /// A parking to reuse for the next blocking wait, so that a wait allocates no semaphore.
  @exclusivity(unchecked) private var spareParking: Parking? = Parking()

  /// A parking for one blocking wait; give it back with ``returnParking(_:)``. A wait nested in
  /// code that runs during another wait of this thread (an initializer run by its own hop)
  /// gets a fresh one.
  func takeParking() -> Parking {
    defer { spareParking = nil }
    return spareParking ?? Parking()
  }

  func returnParking(_ parking: Parking) {
    spareParking = parking
  }

  private init() {
    id = ThreadID.current()
    #if os(Linux)
      isMainThread = id == ThreadID.mainThread
    #else
      isMainThread = pthread_main_np() != 0
    #endif
  }

  /// The calling thread's record.
  static var current: ThreadRecord {
    if let raw = pthread_getspecific(key) {
      return Unmanaged<ThreadRecord>.fromOpaque(raw).takeUnretainedValue()
    }
    let record = ThreadRecord()
    let status = pthread_setspecific(key, Unmanaged.passRetained(record).toOpaque())
    // Without the record in place, every call would make a new one and lose its depth.
    guard status == 0 else {
      Diagnostics.internalInconsistency("pthread_setspecific failed with \(status)")
    }
    return record
  }

  private static let key: pthread_key_t = {
    var key = pthread_key_t()
    let status = pthread_key_create(&key) { raw in
      guard let raw else { return }
      Unmanaged<ThreadRecord>.fromOpaque(raw).release()
    }
    guard status == 0 else {
      fatalError("MainOnce: pthread_key_create failed (\(status)); too many thread-local keys")
    }
    return key
  }()
}

/// Where a blocked caller sleeps until it is resolved. Each thread keeps one to reuse (see
/// ``ThreadRecord/takeParking()``): every use is one `signal` and one `wait`.
final class Parking: Sendable {
  private let semaphore = DispatchSemaphore(value: 0)

  func signal() { semaphore.signal() }
  func wait() { semaphore.wait() }
}
