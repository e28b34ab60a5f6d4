internal import Dispatch
internal import Synchronization
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
  // This is safe because `id` and `isMainThread` never change, and `mainContextDepth`,
  // `innermostInPlaceRun`, `spareParker`, `spareWaiters`, `objectCellCache` and `trackedWaits`
  // (each made once; the objects they hold say why they may be shared) are only read and
  // written by the thread this record belongs to; that also makes their accesses exclusive, so
  // they skip the dynamic check. The published wait and its count are atomics.

  /// The kernel thread id, read once: `gettid()` is a system call.
  let id: ThreadID
  /// Whether this is the process's main thread (tid == pid).
  let isMainThread: Bool
  /// How many main-queue attempts this thread is running right now. They run in main context,
  /// so a non-zero depth proves main context where libdispatch's queue state cannot be read.
  // This is safe because only the thread this record belongs to reads and writes it.
  @exclusivity(unchecked) var mainContextDepth = 0
  /// A parker to reuse for the next blocking wait, so that a wait allocates no semaphore.
  // This is safe because only the thread this record belongs to reads and writes it.
  @exclusivity(unchecked) private var spareParker: Parker? = Parker()
  /// The innermost once-cell whose attempt this thread runs in place, without a gate, linked
  /// to the runs it is nested in: a re-entrant call names the call that runs it. Each run lives
  /// on this thread's stack, in ``MainQueueEngine``'s `runInPlace`, which links it here for as
  /// long as it runs and unlinks it before it returns: no allocation, no array to grow.
  // This is safe because only the thread this record belongs to reads and writes it.
  @exclusivity(unchecked) var innermostInPlaceRun: UnsafePointer<InPlaceRun>?
  /// What rooms above the engine keep for this thread, whose types the engine does not know:
  /// `PerObject/`'s cache of the object cells the thread used last, and the tracked wait
  /// `TrackedWaits/` reuses for it. Each is made at the thread's first use of its room and held
  /// retained here, released with the record, so that those rooms read it without a retain.
  // This is safe because only the thread this record belongs to reads and writes it.
  @exclusivity(unchecked) var objectCellCache: Unmanaged<AnyObject>?
  // This is safe because only the thread this record belongs to reads and writes it.
  @exclusivity(unchecked) var trackedWaits: Unmanaged<AnyObject>?
  /// The wait this thread is blocked in, for the deadlock detector (see ``WaitBoard``): the
  /// unretained address of an object conforming to `BlockingWait`, or 0.
  let publishedWait = Atomic<UInt>(0)
  /// Bumped by this thread each time it publishes a wait: the detector tells one wait from the
  /// next that reuses the same object by it.
  let publications = Atomic<UInt>(0)

  /// The records of this thread's last two blocking once-cell calls, to reuse for its next.
  // This is safe because only the thread this record belongs to reads and writes it.
  @exclusivity(unchecked) private var spareWaiters: (Waiter?, Waiter?)

  /// A caller record for a blocking once-cell call of this thread: one that an earlier call
  /// used, if nothing else refers to it any more (no gate, queue, wait board or deadlock
  /// report), so that blocking calls allocate none after a thread's first two; otherwise a new
  /// one, which replaces the older spare. Two, because the thread that resolved the last call
  /// may still hold it for a moment after waking this one; a call nested in a wait of this
  /// thread finds its outer call's record held by a gate, and takes the other.
  func takeWaiter(
    site: CallSite, label: CellLabel, kind: Waiter.Kind, attempt: @escaping Attempt,
    storage: UnsafePointer<_OnceWord>
  ) -> Waiter {
    let waiter: Waiter
    if spareWaiters.0 != nil, isKnownUniquelyReferenced(&spareWaiters.0!) {
      waiter = spareWaiters.0!
    } else if spareWaiters.1 != nil, isKnownUniquelyReferenced(&spareWaiters.1!) {
      waiter = spareWaiters.1!
    } else {
      let new = Waiter(site: site, label: label, kind: kind, attempt: attempt, storage: storage)
      spareWaiters = (new, spareWaiters.0)
      return new
    }
    waiter.reuse(site: site, label: label, kind: kind, attempt: attempt, storage: storage)
    return waiter
  }

  /// A parker for one blocking wait; give it back with ``returnParker(_:)``. A wait nested in
  /// another wait of this thread gets a fresh one.
  func takeParker() -> Parker {
    defer { spareParker = nil }
    return spareParker ?? Parker()
  }

  func returnParker(_ parker: Parker) {
    spareParker = parker
  }

  deinit {
    objectCellCache?.release()
    trackedWaits?.release()
  }

  private init() {
    id = ThreadID.current()
    #if os(Linux)
      isMainThread = id == ThreadID.mainThread
    #else
      isMainThread = pthread_main_np() != 0
    #endif
  }

  /// The calling thread's record, unretained: the thread keeps it alive as long as it runs.
  static var currentUnmanaged: Unmanaged<ThreadRecord> { unmanaged(at: nil) }

  /// The calling thread's record: one thread-local load once made.
  static var current: ThreadRecord { unmanaged(at: nil).takeUnretainedValue() }

  /// The calling thread's record, for a call made at `site`: named if the record cannot be made.
  static func current(at site: CallSite) -> ThreadRecord {
    unmanaged(at: site).takeUnretainedValue()
  }

  /// The calling thread's record: one thread-local load once made. The thread's key keeps it
  /// alive, so an unretained reference is enough.
  @inline(__always)
  static func unmanaged(at site: CallSite?) -> Unmanaged<ThreadRecord> {
    guard let raw = mainonce_thread_record() else { return .passUnretained(makeCurrent(at: site)) }
    return Unmanaged<ThreadRecord>.fromOpaque(raw)
  }

  /// Makes the calling thread's record. The thread-local variables point at it; a pthread key
  /// holds the reference, so that the record is released when the thread exits.
  ///
  /// A forked child has no records: the fork handler (in the C shim) forgets the forking
  /// thread's, which names its id in the parent, and the first record made in the child
  /// forgets every other thread of the parent (``WaitBoard/register(_:)``). A child whose parent
  /// had started libdispatch's worker threads stops here, at MainOnce's first slow path: those
  /// threads are gone, libdispatch still counts them, and neither its timers nor its global
  /// queues run work there (measured), so a stall would never be reported and a task never run.
  /// So does a child forked by a thread other than its parent's main thread: libdispatch keeps
  /// the main queue bound to that main thread, absent here, and runs no main-queue work at all
  /// (measured: neither `dispatchMain()` nor `RunLoop.main` runs it), so no initializer for the
  /// main queue could ever run.
  @inline(never)
  private static func makeCurrent(at site: CallSite?) -> ThreadRecord {
    if mainonce_fork_inherits_dead_pool() {
      Diagnostics.fail(
        "MainOnce: this process was forked from one in which libdispatch had started worker"
          + " threads\(site.map { ", and the call at \($0) is MainOnce's first use in it" } ?? "")"
          + ". Those threads do not exist in the child, but libdispatch still counts them: its"
          + " timers and global queues never run work here, Swift concurrency's tasks among it,"
          + " so MainOnce could neither watch a wait nor serve an async caller. Fork before any"
          + " Dispatch or Swift concurrency work starts, or call exec in the child.",
        at: site)
    }
    if mainonce_fork_lost_main_queue() {
      Diagnostics.fail(
        "MainOnce: this process was forked by a thread other than its parent's main thread"
          + "\(site.map { ", and the call at \($0) is MainOnce's first use in it" } ?? "")"
          + ". libdispatch keeps the main queue bound to the parent's main thread, which does not"
          + " exist in the child: no main-queue work ever runs here (neither dispatchMain() nor"
          + " RunLoop.main runs it), so no initializer for the main queue could run and its"
          + " callers would wait forever. Fork from the main thread, or call exec in the child.",
        at: site)
    }
    let record = ThreadRecord()
    let retained = Unmanaged.passRetained(record).toOpaque()
    // Without the record in place, every call would make a new one and lose its depth.
    let status = pthread_setspecific(key, retained)
    if status != 0 { Diagnostics.internalInconsistency("pthread_setspecific failed: \(status)") }
    mainonce_set_thread_record(retained)
    WaitBoard.register(record)
    return record
  }

  private static let key: pthread_key_t = {
    var key = pthread_key_t()
    let status = pthread_key_create(&key) { raw in
      guard let raw else { return }
      // The thread is exiting: no call of its own reads the record after this, and one that
      // comes later (from another key's destructor) makes a new record.
      mainonce_forget_thread_record()
      let record = Unmanaged<ThreadRecord>.fromOpaque(raw).takeRetainedValue()
      WaitBoard.unregister(record)
    }
    guard status == 0 else {
      fatalError("MainOnce: pthread_key_create failed (\(status)); too many thread-local keys")
    }
    return key
  }()
}

/// A once-cell whose attempt a thread runs in place (see ``ThreadRecord/innermostInPlaceRun``):
/// its word, the call that runs it, and the run it is nested in, if any.
struct InPlaceRun {
  let word: UnsafeRawPointer
  let site: CallSite
  let outer: UnsafePointer<InPlaceRun>?
}

/// Where a blocked caller sleeps until it is resolved: a single-token parker, as Rust's
/// thread parker. Each thread keeps one to reuse (see ``ThreadRecord/takeParker()``).
///
/// ``unpark()`` leaves one token (several unparks leave one); ``park(until:)`` takes the token,
/// or sleeps until one comes or the deadline passes. Every wait is resolved by exactly one
/// unpark, and its caller parks until it has taken that token: a timed park that gives up, or a
/// wake-up that comes late, never leaves a token behind for the thread's next wait.
///
/// States: 1 a token is there, 0 none, -1 the owner sleeps (or is about to) in the semaphore.
/// Only an unpark that finds -1 signals the semaphore, and the owner takes every such signal.
final class Parker: Sendable {
  private let state = Atomic<Int>(0)
  private let semaphore = DispatchSemaphore(value: 0)

  /// Leaves the token, waking the owner if it sleeps. The releasing exchange orders what the
  /// caller wrote before it (a resolution) before the owner's return from ``park(until:)``.
  func unpark() {
    if state.exchange(1, ordering: .acquiringAndReleasing) == -1 { semaphore.signal() }
  }

  /// Takes the token, waiting for it until `deadline` (`nil`: for as long as it takes).
  /// Returns whether it took the token.
  func park(until deadline: DispatchTime?) -> Bool {
    // 1 → 0: the token was there. 0 → -1: sleep.
    if state.subtract(1, ordering: .acquiring).oldValue == 1 { return true }
    var timedOut = false
    if let deadline {
      timedOut = semaphore.wait(timeout: deadline) == .timedOut
    } else {
      semaphore.wait()
    }
    // Back to 0. If an unpark came after all, it has signalled or will: take that signal too,
    // so that it does not wake the next park.
    let tookToken = state.exchange(0, ordering: .acquiring) == 1
    if timedOut && tookToken { semaphore.wait() }
    return tookToken
  }
}
