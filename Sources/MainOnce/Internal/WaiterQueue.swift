/// The callers of a flight, in arrival order: a list threaded through the waiters, so that
/// queueing one allocates nothing; each caller's phase is kept in its waiter. Under the lock.
struct WaiterQueue: Sequence, FlightCallers {
  typealias Thread = ThreadID

  private var head: Waiter?
  private var tail: Waiter?

  var isEmpty: Bool { head == nil }

  func phase(of waiter: Waiter) -> CallerPhase { waiter.phase }

  func setPhase(_ phase: CallerPhase, of waiter: Waiter) { waiter.phase = phase }

  func borrowsStorage(_ waiter: Waiter) -> Bool { waiter.storage != nil }

  mutating func append(_ waiter: Waiter) {
    waiter.next = nil
    if let tail { tail.next = waiter } else { head = waiter }
    tail = waiter
  }

  mutating func remove(_ waiter: Waiter) {
    var previous: Waiter?
    var current = head
    while let candidate = current, candidate !== waiter {
      previous = candidate
      current = candidate.next
    }
    guard current != nil else { return }
    if let previous { previous.next = waiter.next } else { head = waiter.next }
    if tail === waiter { tail = previous }
    waiter.next = nil
  }

  func first(where predicate: (Waiter) -> Bool) -> Waiter? {
    var current = head
    while let waiter = current, !predicate(waiter) { current = waiter.next }
    return current
  }

  mutating func removeFirst() -> Waiter? {
    guard let waiter = head else { return nil }
    head = waiter.next
    if head == nil { tail = nil }
    waiter.next = nil
    return waiter
  }

  func makeIterator() -> Iterator { Iterator(current: head) }

  struct Iterator: IteratorProtocol {
    var current: Waiter?

    mutating func next() -> Waiter? {
      defer { current = current?.next }
      return current
    }
  }
}
