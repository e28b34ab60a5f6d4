/// The callers queued in a flight, in arrival order: a list threaded through the waiters, so
/// that queueing one allocates nothing. Under the lock.
struct WaiterQueue: Sequence {
  private var head: Waiter?
  private var tail: Waiter?

  var isEmpty: Bool { head == nil }

  mutating func append(_ waiter: Waiter) {
    waiter.next = nil
    if let tail { tail.next = waiter } else { head = waiter }
    tail = waiter
  }

  /// Takes `waiter` out, if it is in.
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

  mutating func removeAll() {
    while let waiter = head {
      head = waiter.next
      waiter.next = nil
    }
    tail = nil
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
