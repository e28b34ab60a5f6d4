// Per-object once: `onceOnMain(for:)` and `runOnce(for:)`, one cell for each object and call
// site. This room owns the table of cells and each thread's cache of them (this file), how a cell
// tells that its object is gone (`ObjectLifetimes.swift`), and `runOnce(for:)`'s cell and its
// state machine (`RunOnceCell.swift`, `RunOnceMachine.swift`). It calls the engine in `Engine/`
// (a cell for the main queue is an engine cell; a `runOnce(for:)` caller parks through it and
// shows its wait through the engine's read-only view of a wait; a thread's record keeps the
// thread's cache), `Platform/` (locks, thread ids) and `Reporting/` (names and crash messages).
internal import _CMainOnceShims

/// One object's once-cell for one call site, for `onceOnMain(for:)` and `runOnce(for:)`.
///
/// It holds its object weakly, so MainOnce never keeps an object alive, and a cell whose object
/// is gone is stale: a new object that reuses the address finds the weak reference empty and
/// gets a fresh cell, so its call sites run again. Its word is even once the call site is done
/// for the object (see `OnceCell.swift`). It carries its own key, so that the table of cells
/// holds one reference per cell and nothing else.
class ObjectCell: @unchecked Sendable {
  // This is safe because `object` is set once, here, and only read afterwards (weak loads are
  // safe against each other and against the object's deinitialization); the key never changes,
  // and `word` is an atomic.
  weak var object: AnyObject?
  let key: ObjectCells.Key
  let word = _OnceWord()
  /// The side table of the object, which the weak reference keeps allocated: how the fast path
  /// tells the object's lifetime without a weak load (see ``ObjectLifetimes``); 0 if it cannot.
  let sideTable: UInt

  init(object: AnyObject, key: ObjectCells.Key) {
    self.object = object
    self.key = key
    sideTable =
      ObjectLifetimes.usesWeakLoads ? 0 : ObjectLifetimes.sideTable(of: object)
  }

  var site: DeclarationSite { key.site }
}

/// The storage of one object's `onceOnMain(for:)` call site: a class, so that a caller holds it
/// in place for the length of its call, also after the object is gone.
// This is safe because it adds nothing to `ObjectCell`, whose comment says why that is.
final class MainQueueObjectCell: ObjectCell, @unchecked Sendable {}

/// Finds the cell of an object's call site.
///
/// Every thread keeps the cells it used last in a small cache of its own (``ObjectCellCache``),
/// reached through a thread-local variable: a call site that is done costs a lookup there and
/// the weak load that checks that the object is still the cell's, with no lock, no retain and no
/// write that another thread sees. A miss takes the table's lock, which also sweeps stale cells
/// once the table has doubled since the last sweep.
enum ObjectCells {
  /// A cell's key: the object and the call site.
  struct Key: Hashable {
    let object: ObjectIdentifier
    let site: DeclarationSite

    init(_ object: AnyObject, _ site: CallSite) {
      self.object = ObjectIdentifier(object)
      self.site = DeclarationSite(site)
    }

    /// The slot of a thread's cache: mixes the address with the line and column, without
    /// hashing the file name.
    var cacheIndex: Int { tableIndex(in: ObjectCellCache.capacity) }

    /// A slot in a table of `capacity` slots, a power of two.
    func tableIndex(in capacity: Int) -> Int {
      let address = UInt(bitPattern: object)
      let mixed = (address >> 4) ^ (address >> 12) ^ UInt(site.line) &* 31 ^ UInt(site.column)
      return Int(mixed & UInt(capacity - 1))
    }
  }

  /// The cells, by key: open addressing, one reference a slot, at most three quarters full.
  /// Cells whose object is gone are swept out when the table grows. Only a thread's cache miss
  /// looks here, so the table is kept small rather than its probes short.
  struct Table {
    private(set) var slots = [ObjectCell?](repeating: nil, count: 64)
    private(set) var count = 0

    /// The cell for `key` whose object is `object`.
    func cell(for key: Key, of object: AnyObject) -> ObjectCell? {
      var index = key.tableIndex(in: slots.count)
      while let cell = slots[index] {
        if cell.key == key, cell.object === object { return cell }
        index = (index + 1) & (slots.count - 1)
      }
      return nil
    }

    /// Adds `cell`, in the place of a stale cell of the same key if there is one.
    mutating func insert(_ cell: ObjectCell) {
      if (count + 1) * 4 > slots.count * 3 { rebuild() }
      var index = cell.key.tableIndex(in: slots.count)
      while let existing = slots[index], existing.key != cell.key {
        index = (index + 1) & (slots.count - 1)
      }
      if slots[index] == nil { count += 1 }
      slots[index] = cell
    }

    /// Keeps the cells whose object is alive, in a table of twice their number or more.
    private mutating func rebuild() {
      let live = slots.compactMap { $0 }.filter { $0.object != nil }
      var capacity = 64
      while capacity < live.count * 2 { capacity *= 2 }
      slots = [ObjectCell?](repeating: nil, count: capacity)
      count = 0
      for cell in live { insert(cell) }
    }
  }

  static let table = Locked(Table(), rank: .objectCells)

  /// Whether `object`'s `site` is done, as the calling thread's cache knows it: `false` when
  /// the cache does not know. The fast path of the per-object calls.
  @inline(__always)
  static func isDone(_ object: AnyObject, at site: CallSite) -> Bool {
    guard let slots = mainonce_object_cells() else { return false }
    let key = Key(object, site)
    let slot = slots.assumingMemoryBound(to: ObjectCellCache.Slot.self) + key.cacheIndex
    guard slot.pointee.key == key, let cell = slot.pointee.cell else { return false }
    // The cache holds the cell, and so its side table. Either check proves the object the
    // cell's, alive and not in its deinit (a weak reference to an object being deinitialized
    // reads nil): the side table's, with two plain loads, or a weak load.
    return cell._withUnsafeGuaranteedRef { cell in
      guard cell.word.isPublished else { return false }
      guard cell.sideTable != 0 else { return cell.object === object }
      return ObjectLifetimes.isLive(object, withSideTable: cell.sideTable)
    }
  }

  /// The cell of `site` in the current lifetime of `object`, made with `make` the first time.
  static func cell<Cell: ObjectCell>(
    for object: AnyObject, at site: CallSite, operation: StaticString,
    make: (AnyObject, Key) -> Cell
  ) -> Cell {
    // An object in its `deinit` cannot be told from a new object at a reused address: a weak
    // reference to it reads `nil` in both cases. A call from there stops the process instead of
    // running the call site a second time.
    guard WeakReference(object).object != nil else {
      Diagnostics.fail(
        """
        MainOnce: \(operation) at \(site) was called for a \(type(of: object)) that is being \
        deinitialized: MainOnce cannot tell whether this call site already ran in its \
        lifetime. A deinit runs once per object; do that work there directly.
        """,
        at: site)
    }
    let key = Key(object, site)
    let cell = table.withLock { table -> ObjectCell in
      if let existing = table.cell(for: key, of: object) { return existing }
      let cell = make(object, key)
      table.insert(cell)
      return cell
    }
    guard let cell = cell as? Cell else {
      Diagnostics.fail(
        "MainOnce: \(operation) at \(site) shares its call site with another per-object API",
        at: site)
    }
    ThreadRecord.current.remember(cell, for: key)
    return cell
  }
}

/// A thread's cache of the object cells it used last: direct-mapped, a slot per key, holding
/// its cell. Only its thread reads or writes it; the thread's record keeps it
/// (``ThreadRecord/objectCellCache``), made at the thread's first per-object call: a thread that
/// makes none keeps no cache.
final class ObjectCellCache {
  static var capacity: Int { 64 }

  struct Slot {
    var key: ObjectCells.Key?
    var cell: Unmanaged<ObjectCell>?
  }

  private let slots: UnsafeMutablePointer<Slot>

  init() {
    slots = .allocate(capacity: Self.capacity)
    slots.initialize(repeating: Slot(), count: Self.capacity)
  }

  deinit {
    for index in 0..<Self.capacity { slots[index].cell?.release() }
    slots.deinitialize(count: Self.capacity)
    slots.deallocate()
  }

  /// The slots' address, for the thread-local variable that the fast path reads.
  var slotsAddress: UnsafeMutableRawPointer { UnsafeMutableRawPointer(slots) }

  /// Keeps `cell` in the slot of `key`, letting go of the cell that was there.
  func remember(_ cell: ObjectCell, for key: ObjectCells.Key) {
    let slot = slots + key.cacheIndex
    slot.pointee.cell?.release()
    slot.pointee = Slot(key: key, cell: .passRetained(cell))
  }
}

extension ThreadRecord {
  /// Keeps `cell` in this thread's cache of object cells, where the per-object fast path finds
  /// it, making the cache at the thread's first per-object call.
  func remember(_ cell: ObjectCell, for key: ObjectCells.Key) {
    if let cache = objectCellCache {
      // This is safe because only this extension stores to the slot, and only a cache.
      return Unmanaged<ObjectCellCache>.fromOpaque(cache.toOpaque())
        ._withUnsafeGuaranteedRef { $0.remember(cell, for: key) }
    }
    let cache = ObjectCellCache()
    mainonce_set_object_cells(cache.slotsAddress)
    objectCellCache = .passRetained(cache)
    cache.remember(cell, for: key)
  }
}
