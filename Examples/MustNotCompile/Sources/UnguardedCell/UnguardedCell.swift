@testable import MainOnce

/// What a flight decides is reachable only with proof that the engine's lock is held, which
/// only `OnceCell.withLock` lends to its body.
func peek(at flight: Flight) -> UInt? {
  // error: missing argument for parameter 'holding' in call: the flight's state is read only
  // inside `OnceCell.withLock { held in flight.outcome(holding: held) }`.
  flight.outcome()
}

func forge() -> UInt? {
  // error: 'OnceCell.Held' initializer is inaccessible due to 'fileprivate' protection level:
  // nothing but the lock makes the proof.
  let held = OnceCell.Held()
  _ = held
  return nil
}
