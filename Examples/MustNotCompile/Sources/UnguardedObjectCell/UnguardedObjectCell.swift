@testable import MainOnce

/// A `runOnce(for:)` call site's run is reachable only with proof that `RunOnceCell`'s lock is
/// held, which only `RunOnceCell.withLock` lends to its body.
func dropRun(of cell: RunOnceCell) {
  // error: missing argument for parameter 'holding' in call: it is changed only inside
  // `RunOnceCell.withLock { held in cell.withRun(holding: held) { ... } }`.
  cell.withRun { $0 = nil }
}
