internal import Synchronization
internal import _CMainOnceShims

/// Where threads publish the waits they block in, for whoever watches them to read: the table
/// the engine keeps for the deadlock detector, as a lock manager keeps the lock table its
/// deadlock check reads. The engine's waits and those of the rooms above it publish here; the
/// detector (and MainOnce's tests) only read.
///
/// Publishing is a store: the waiting thread puts the address of its wait object (kept alive by
/// its own frame) in its ``ThreadRecord/publishedWait`` and bumps its publication count.
/// Nothing else happens on the waiting path; the observer hears of a wait only once it has
/// outlived its grace period (see `WaitObserver`). Only the thread itself writes its slot and
/// count.
///
/// Reading another thread's slot is safe because of a two-sided handshake. A reader announces
/// itself in ``readers``, then takes ``lock`` and, inside it, loads the slots and reads the
/// objects they name. A thread that withdraws its wait stores its slot back, then looks at
/// ``readers``: if a reader is about, it takes and releases ``lock`` before its frame lets the
/// object go. Either the reader sees the slot already withdrawn, or the withdrawing thread sees
/// the reader and waits for it. Each side's store and load are ordered by one of two protocols:
///
/// - *barrier*: the reader runs a heavy barrier (`membarrier`, private expedited: a full fence
///   on every running thread) between its count and its loads; the withdrawing thread needs
///   only a compiler barrier, so that a wait costs no fence. Sound only for a reader whose
///   barrier worked.
/// - *sequentially consistent*: the count, the slot's store and both loads are sequentially
///   consistent operations. Sound for every reader, whatever its barrier did.
///
/// States. The board's *mode*, `mainonce_wait_board_tag()` in the C shim, is the protocol that
/// new waits are published under: 0, barrier, if `membarrier` was registered at load, else 1,
/// sequentially consistent. It goes from 0 to 1 once, never back, at the first heavy barrier
/// that fails (a seccomp filter the program installed since); that reader warns, once. A
/// *slot* is 0 (no wait) or a wait object's address with its low bit (free: Swift objects are
/// aligned to 16 bytes) as its *tag*, the protocol it was published under. A thread's slot goes
/// from its outer value (0, or an outer wait) to `address | mode` when it publishes, back to
/// the outer value, with the outer wait's own tag, when it withdraws, and from tag 0 to tag 1
/// when it publishes the same wait again after the switch. Only the thread itself writes it.
///
/// Loads and stores:
///
/// - ``publish(_:on:)``: the count bumped (relaxed load and store: its own), the previous slot
///   read (relaxed: its own), a relaxed load of the mode, the tagged address stored with
///   release, so that a reader that sees it sees the wait's fields. Nothing rests on the mode's
///   load: a slot published under a stale mode 0 is withdrawn under the barrier protocol, which
///   is sound for every reader that reads it (below).
/// - ``withdraw(_:on:)``: a relaxed load of its own slot for its tag; then, under that
///   protocol, the store of the outer value and the load of ``readers``: a releasing store, a
///   compiler barrier and an acquiring load; or both sequentially consistent.
/// - ``read(_:)``: ``readers`` incremented, sequentially consistent; the barrier (a
///   `membarrier` in mode 0, a fence in mode 1); then each count, slot and count again,
///   sequentially consistent. A slot tagged 1 is always read: its withdrawal is sequentially
///   consistent. A slot tagged 0 is read only if this reader's own `membarrier` worked; after
///   a failure, a thread withdrawing it uses no fence and may already have let its object go,
///   so it is skipped, never dereferenced.
/// - ``republishOwnWait()``: in mode 1, a thread re-tags its own slot 1 (a sequentially
///   consistent store; the same wait, so the count stays). It frees nothing, so it is safe for
///   readers in the middle of a read; its withdrawal is then sequentially consistent, sound for
///   them too. A blocked once-cell caller and a semaphore or group wait do it at every slice of
///   the detector's watch of a wait that outlived its grace period, and every reader at its read:
/// after a failure, they are seen again within
///   a slice. A `trackedSync` blocked in `sync` and a `withTrackedWait` cannot look again:
///   published before the switch, they are missed until they end, and a deadlock closed
///   through them goes unseen meanwhile.
///
/// Publishing needs no handshake: a reader that misses a wait published just now reads again
/// at its next look.
enum WaitBoard {
  /// Every live thread record, by thread: those the detector reads.
  private static let records = Locked<[ThreadID: ThreadRecord]>([:])
  private static let readers = Atomic(0)
  private static let lock = Lock(rank: .waitBoard)
  /// The tag of a slot published under the sequentially consistent protocol.
  private static let sequential: UInt = 1

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
    // goes first; the releasing store of the address, tagged with the board's protocol now,
    // orders it, and the wait's fields, before a reader that sees the address.
    thread.publications.store(
      thread.publications.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
    let previous = thread.publishedWait.load(ordering: .relaxed)
    thread.publishedWait.store(address | mainonce_wait_board_tag(), ordering: .releasing)
    return previous
  }

  /// Withdraws the wait published last, putting back `previous`, and waits for any reader that
  /// may hold its address; under the protocol of the wait's own tag.
  @inline(__always)
  static func withdraw(_ previous: UInt, on thread: ThreadRecord) {
    if thread.publishedWait.load(ordering: .relaxed) & sequential == 0 {
      // The heavy barrier of every reader that reads this slot orders this store before the
      // load below.
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
    // before has its store visible below: by the heavy barrier for slots tagged 0, which are
    // read only if it worked; by their sequentially consistent operations for those tagged 1.
    let isOrdered = Platform.heavyBarrier()
    republishOwnWait()
    let all = records.withLock { Array($0.values) }
    return lock.withLock {
      body(
        all.compactMap { record in
          // Read between two readings of the count: a wait withdrawn and published again in
          // between (perhaps the same object) is not taken for the one before.
          let publication = record.publications.load(ordering: .sequentiallyConsistent)
          let address = record.publishedWait.load(ordering: .sequentiallyConsistent)
          guard isOrdered || address & sequential != 0,
            let pointer = UnsafeRawPointer(bitPattern: address & ~sequential),
            record.publications.load(ordering: .sequentiallyConsistent) == publication
          else { return nil }
          // This is safe because the slot's protocol holds for this reader (tag 1, or tag 0
          // after a barrier that worked), so its thread waits for `lock`, held here, before it
          // lets the object go.
          return (Unmanaged<AnyObject>.fromOpaque(pointer).takeUnretainedValue(), publication)
        })
    }
  }

  /// Re-publishes the calling thread's wait, if it was published under the barrier protocol,
  /// under the sequentially consistent one, once the board has switched to it: readers skip
  /// the former.
  static func republishOwnWait() {
    guard mainonce_wait_board_tag() == sequential else { return }
    let thread = ThreadRecord.current, wait = thread.publishedWait.load(ordering: .relaxed)
    if wait & sequential == 0, wait != 0 {
      thread.publishedWait.store(wait | sequential, ordering: .sequentiallyConsistent)
    }
  }

  /// How long a blocking wait lasts before the observer hears of it (`WaitObserver`), and so
  /// before the deadlock detector looks: a wait that ends sooner runs none of the detector's
  /// code.
  static let gracePeriod: UInt64 = 50_000_000
}
