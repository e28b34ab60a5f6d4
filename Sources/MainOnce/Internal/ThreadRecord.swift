internal import Dispatch
internal import _CMainOnceShims

#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Musl)
  internal import Musl
#elseif canImport(Darwin)
  internal import Darwin
#endif

/// What MainOnce keeps about one thread, made the first time the thread takes a slow path.
final class ThreadRecord: @unchecked Sendable {
  // This is safe because `id`, `isMainThread` and `objectCells` never change, and
  // `mainContextDepth`, the cache's slots and `spareParking` are only read and written by the
  // thread this record belongs to; that also makes their accesses exclusive, so they skip the
  // dynamic check.

  /// The kernel thread id, read once: `gettid()` is a system call.
  let id: ThreadID
  /// Whether this is the process's main thread (tid == pid).
  let isMainThread: Bool
  /// How many main-queue attempts this thread is running right now. They run in main context,
  /// so a non-zero depth proves main context where libdispatch's queue state cannot be read.
  @exclusivity(unchecked) var mainContextDepth = 0
  /// The object cells this thread used last (see ``ObjectCells``).
  let objectCells = ObjectCellCache()
  /// A parking to reuse for the next blocking wait, so that a wait allocates no semaphore.
  @exclusivity(unchecked) private var spareParking: Parking? = Parking()

  /// A parking for one blocking wait; give it back with ``returnParking(_:)``. A wait nested in
  /// another wait of this thread gets a fresh one.
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

  /// The calling thread's record: one thread-local load once made.
  static var current: ThreadRecord {
    guard let raw = mainonce_thread_record() else { return makeCurrent() }
    return Unmanaged<ThreadRecord>.fromOpaque(raw).takeUnretainedValue()
  }

  /// Makes the calling thread's record. The thread-local variables point at it; a pthread key
  /// holds the reference, so that the record is released when the thread exits.
  @inline(never)
  private static func makeCurrent() -> ThreadRecord {
    let record = ThreadRecord()
    let retained = Unmanaged.passRetained(record).toOpaque()
    // Without the record in place, every call would make a new one and lose its depth.
    let status = pthread_setspecific(key, retained)
    if status != 0 { Diagnostics.internalInconsistency("pthread_setspecific failed: \(status)") }
    mainonce_set_thread_record(retained, record.objectCells.slotsAddress)
    return record
  }

  private static let key: pthread_key_t = {
    var key = pthread_key_t()
    let status = pthread_key_create(&key) { raw in
      guard let raw else { return }
      // The thread is exiting: no call of its own reads the record after this, and one that
      // comes later (from another key's destructor) makes a new record.
      mainonce_set_thread_record(nil, nil)
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
