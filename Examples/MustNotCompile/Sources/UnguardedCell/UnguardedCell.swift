@testable import MainOnce

/// What a gate decides is reachable only with proof that the engine's lock is held, which
/// only `OnceCell.withLock` lends to its body.
func peek(at gate: Gate) -> UInt? {
  // error: missing argument for parameter 'holding' in call: the gate's state is read only
  // inside `OnceCell.withLock { held in gate.outcome(holding: held) }`.
  gate.outcome()
}

func forge() -> UInt? {
  // error: 'OnceCell.LockHeld' initializer is inaccessible due to 'fileprivate' protection level:
  // nothing but the lock makes the proof.
  let held = OnceCell.LockHeld()
  _ = held
  return nil
}
