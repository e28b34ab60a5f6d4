@testable import MainOnce

/// How a caller is woken and how its wait ended are written only by the gate, holding the
/// engine's lock.
func answer(_ waiter: Waiter) {
  // error: cannot assign to property: 'kind' setter is inaccessible: a task's continuation is
  // recorded only with the lock's proof, `waiter.suspend(with:holding:)`.
  waiter.kind = .inPlace
  // error: cannot assign to property: 'answer' is a get-only property: the gate answers a
  // caller under the lock, before the releasing store that marks it answered.
  waiter.answer = .done
}
