/// The once-cells of objects, by object and call site, for `onceOnMain(for:)` and
/// `runOnce(for:)`.
///
/// An entry holds its object weakly, so MainOnce never keeps an object alive. An entry whose
/// object has been deallocated is stale: a new object that reuses the address finds the weak
/// reference empty (or pointing elsewhere) and starts a fresh entry, so its call sites run
/// again. Stale entries are swept when the table has doubled since the last sweep.
enum ObjectCells {
  /// One object's cells. A class, so that a lookup does not copy the cell table.
  final class Entry {
    weak var object: AnyObject?
    // Unchecked: only touched under the table's lock, which makes every access exclusive.
    @exclusivity(unchecked) var cells: [CallSite: AnyObject] = [:]

    init(object: AnyObject) {
      self.object = object
    }
  }

  struct Table {
    var entries: [ObjectIdentifier: Entry] = [:]
    var sweepAt = 64

    mutating func sweepIfLarge() {
      guard entries.count >= sweepAt else { return }
      entries = entries.filter { $0.value.object != nil }
      sweepAt = max(64, entries.count * 2)
    }
  }

  static let table = Locked(Table())

  /// The cell of `site` in the current lifetime of `object`, made with `make` the first time.
  ///
  /// An object in its `deinit` cannot be told from a new object at a reused address: a weak
  /// reference to it reads `nil` in both cases. A call from there stops the process instead of
  /// running the call site a second time.
  static func cell<Cell: AnyObject>(
    for object: AnyObject, at site: CallSite, operation: StaticString,
    as: Cell.Type = Cell.self, make: () -> Cell
  ) -> Cell {
    weak let probe = object
    guard probe != nil else {
      Diagnostics.fail(
        """
        MainOnce: \(operation) at \(site) was called for a \(type(of: object)) that is being \
        deinitialized: MainOnce cannot tell whether this call site already ran in its \
        lifetime. A deinit runs once per object; do that work there directly.
        """,
        at: site)
    }
    let cell = table.withLock { table -> AnyObject in
      let key = ObjectIdentifier(object)
      let entry: Entry
      if let existing = table.entries[key], existing.object === object {
        entry = existing
      } else {
        table.sweepIfLarge()
        entry = Entry(object: object)
        table.entries[key] = entry
      }
      if let cell = entry.cells[site] { return cell }
      let cell = make()
      entry.cells[site] = cell
      return cell
    }
    return cell as! Cell
  }
}

extension ObjectCells {
  static func cell(
    for object: AnyObject, at site: CallSite, operation: StaticString,
    as: MainQueueObjectCell.Type
  ) -> MainQueueObjectCell {
    cell(for: object, at: site, operation: operation) { MainQueueObjectCell() }
  }
}
