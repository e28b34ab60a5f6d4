internal import Synchronization
internal import _CMainOnceShims

/// Where threads publish the waits they block in, for the deadlock detector to read.
///
/// Publishing is a store: the waiting thread puts the address of its wait object (kept alive by
/// its own frame) in its ``ThreadRecord/publishedWait`` and bumps its publication count.
/// Nothing else happens on the waiting path; the detector runs only once a wait has outlived
/// its grace (see `Detector`).
///
/// Reading another thread's slot is safe because of a two-sided handshake. A reader announces
/// itself in ``readers``, then takes ``lock`` and, inside it, loads the slots and reads the
/// objects they name. A thread that withdraws its wait stores its slot back, then looks at
/// ``readers``: if a reader is about, it takes and releases ``lock`` before its frame lets the
/// object go. Either the reader sees the slot already withdrawn, or the withdrawing thread sees
/// the reader and waits for it: the store and the load of each side are ordered by a heavy
/// barrier on the reader's side (`membarrier`, registered when the process was loaded) and a
/// compiler barrier on the waiting side, so that a wait costs no fence; where `membarrier` is
/// not available, both sides use sequentially consistent operations instead.
/// Publishing needs no such handshake: a reader that misses a wait published just now reads
/// again at its next look.
enum WaitBoard {
  /// Every live thread record, by thread: those the detector reads.
  private static let records = Locked<[ThreadID: ThreadRecord]>([:])
  private static let readers = Atomic(0)
  private static let lock = Lock(rank: .waitBoard)

  static func register(_ record: ThreadRecord) {
    records.withLock {
      // In a forked child, the parent's threads are gone: only the forking thread goes on, and it
      // makes a new record.
      if mainonce_take_fork_reset() { $0.removeAll() }
      $0[record.id] = record
    }
  }

  static func unregister(_ record: ThreadRecord) {
    records.withLock { if $0[record.id] === record { $0[record.id] = nil } }
  }

  /// Publishes `wait` as what `thread` blocks in; returns what to pass to ``withdraw(_:on:)``:
  /// the wait it is nested in, if any. Called by the thread itself; `wait` must stay alive
  /// until it is withdrawn.
  @inline(__always)
  static func publish(_ wait: AnyObject, on thread: ThreadRecord) -> UInt {
    let address = UInt(bitPattern: Unmanaged.passUnretained(wait).toOpaque())
    // Only this thread writes its slots: loads and stores, no read-modify-write. The count
    // goes first; the releasing store of the address orders it, and the wait's fields, before
    // a reader that sees the address.
    thread.publications.store(
      thread.publications.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
    let previous = thread.publishedWait.load(ordering: .relaxed)
    thread.publishedWait.store(address, ordering: .releasing)
    return previous
  }

  /// Withdraws the wait published last, putting back `previous`, and waits for any reader that
  /// may hold its address.
  @inline(__always)
  static func withdraw(_ previous: UInt, on thread: ThreadRecord) {
    if mainonce_has_heavy_barrier() {
      // The reader's heavy barrier orders this store before the load below.
      thread.publishedWait.store(previous, ordering: .releasing)
      mainonce_light_barrier()
      if readers.load(ordering: .acquiring) != 0 { lock.withLock {} }
    } else {
      thread.publishedWait.store(previous, ordering: .sequentiallyConsistent)
      if readers.load(ordering: .sequentiallyConsistent) != 0 { lock.withLock {} }
    }
  }

  /// Whether `thread` has a wait published now.
  static func isWaiting(_ thread: ThreadID) -> Bool {
    records.withLock { $0[thread] }?.publishedWait.load(ordering: .sequentiallyConsistent) ?? 0
      != 0
  }

  /// Calls `body` with every published wait and its thread's publication count, under the
  /// board's lock: no thread withdraws a wait, and so none reuses or frees its object, until
  /// `body` returns. Read everything needed inside `body`, and keep no object.
  static func read<Result>(_ body: ([(wait: AnyObject, publication: UInt)]) -> Result) -> Result {
    readers.add(1, ordering: .sequentiallyConsistent)
    defer { readers.subtract(1, ordering: .sequentiallyConsistent) }
    // Every thread that withdraws a wait from here on sees the count above; one that withdrew
    // before has its store visible below. Without the heavy barrier, withdrawals are
    // sequentially consistent instead.
    // A barrier that failed orders nothing: then no slot is safe to read.
    guard mainonce_heavy_barrier() else { return body([]) }
    let all = records.withLock { Array($0.values) }
    return lock.withLock {
      body(
        all.compactMap { record in
          // Read between two readings of the count: a wait withdrawn and published again in
          // between (perhaps the same object) is not taken for the one before.
          let publication = record.publications.load(ordering: .sequentiallyConsistent)
          let address = record.publishedWait.load(ordering: .sequentiallyConsistent)
          guard let pointer = UnsafeRawPointer(bitPattern: address),
            record.publications.load(ordering: .sequentiallyConsistent) == publication
          else { return nil }
          return (Unmanaged<AnyObject>.fromOpaque(pointer).takeUnretainedValue(), publication)
        })
    }
  }

  /// How long a blocking wait lasts before it asks the deadlock detector to look: a wait that
  /// ends sooner runs none of the detector's code.
  static let grace: UInt64 = 50_000_000
}
