@testable import MainOnce

// Views of MainOnce's internal state that only tests need: they live here, in the test target,
// so that the shipped library carries no code for them.

extension AsyncMainLazy {
  /// Whether a build is in flight.
  var isBuilding: Bool {
    AsyncBuild.withLock { held in current.withState(holding: held) { $0.build != nil } }
  }
}

extension ObjectCells.Table {
  /// How many cells are stale: their object is gone.
  var staleCount: Int { slots.reduce(0) { $0 + ($1 != nil && $1!.object == nil ? 1 : 0) } }
}
