@testable import MainOnce

/// A build's state is reachable only with proof that `AsyncBuild`'s lock is held, which only
/// `AsyncBuild.withLock` lends to its body.
func markTimed(_ build: AsyncBuild) {
  // error: missing argument for parameter 'holding' in call: it is changed only inside
  // `AsyncBuild.withLock { held in build.withState(holding: held) { $0.isTimed = true } }`.
  build.withState { $0.isTimed = true }
}
