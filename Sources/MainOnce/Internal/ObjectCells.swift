/// The once-cells of objects, by object and call site, for `onceOnMain(for:)` and
/// `runOnce(for:)`.
///
/// An entry holds its object weakly, so MainOnce never keeps an object alive. An entry whose
/// object has been deallocated is stale: a new object that reuses the address finds the weak
/// reference empty (or pointing elsewhere) and starts a fresh entry, so its call sites run
/// again. Stale entries are swept when the table has doubled since the last sweep.
enum ObjectCells {
  /// One call site's storage for one object. A class, so that a caller can keep it alive (and
  /// in place) for the length of its call, also after the entry was replaced or swept.
  final class Box: Sendable {
    let storage = _OnceStorage()
  }

  /// One object's cells. A class, so that a lookup does not copy the cell table.
  final class Entry {
    weak var object: AnyObject?
    // Unchecked: only touched under the table's lock, which makes every access exclusive.
    @exclusivity(unchecked) var cells: [CallSite: Box] = [:]

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

  /// The box holding `site`'s storage in the current lifetime of `object`.
  ///
  /// An object in its `deinit` cannot be told from a new object at a reused address: a weak
  /// reference to it reads `nil` in both cases. A call from there stops the process instead of
  /// running the call site a second time.
  static func box(
    for object: AnyObject, at site: CallSite, operation: StaticString
  ) -> Box {
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
    return table.withLock { table in
      let key = ObjectIdentifier(object)
      let entry: Entry
      if let existing = table.entries[key], existing.object === object {
        entry = existing
      } else {
        table.sweepIfLarge()
        entry = Entry(object: object)
        table.entries[key] = entry
      }
      if let box = entry.cells[site] { return box }
      let box = Box()
      entry.cells[site] = box
      return box
    }
  }
}
