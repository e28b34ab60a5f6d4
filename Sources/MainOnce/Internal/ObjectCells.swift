internal import Synchronization

/// The once-cells of objects, by object and call site, for `onceOnMain(for:)` and
/// `runOnce(for:)`.
///
/// An entry holds its object weakly, so MainOnce never keeps an object alive. An entry whose
/// object has been deallocated is stale: a new object that reuses the address finds the weak
/// reference empty (or pointing elsewhere) and starts a fresh entry, so its call sites run
/// again. Stale entries are swept when the table has doubled since the last sweep.
enum ObjectCells {
  /// One call site's state for one object. A class, so that its address stays put.
  final class Cell: Sendable {
    let state = Atomic<UInt>(0)

    var isDone: Bool { state.load(ordering: .acquiring) != 0 }

    func withCell<Result, Failure: Error>(
      label: CellLabel, _ body: (OnceCell) throws(Failure) -> Result
    ) throws(Failure) -> Result {
      try withUnsafePointer(to: state) { (state) throws(Failure) in
        try body(OnceCell(state: state, label: label))
      }
    }
  }

  /// One object's cells. A class, so that a lookup does not copy the cell table.
  final class Entry {
    weak var object: AnyObject?
    // Unchecked: only touched under the table's lock, which makes every access exclusive.
    @exclusivity(unchecked) var cells: [CallSite: Cell] = [:]

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

  /// The cell for `site` in the current lifetime of `object`.
  static func cell(for object: AnyObject, at site: CallSite) -> Cell {
    table.withLock { table in
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
      let cell = Cell()
      entry.cells[site] = cell
      return cell
    }
  }
}
