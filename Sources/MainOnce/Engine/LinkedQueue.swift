/// The link that a ``LinkedQueue`` threads through its elements: the element queued behind this
/// one. Its field is private to this file, so only the queue reads or writes it.
struct QueueLink<Element: AnyObject> {
  fileprivate var next: Element?

  init() {}
}

/// A class whose instances wait in a ``LinkedQueue``.
protocol QueueLinked: AnyObject {
  /// The element's link, for the one queue it is in (see ``QueueLink``).
  var link: QueueLink<Self> { get set }
}

/// Elements in arrival order: a list threaded through them, so that queueing one allocates
/// nothing. An element is in one queue at most; whoever owns the queue guards it (a cell's lock,
/// or the effects that took its elements out of a machine, which own them until they answer
/// them).
struct LinkedQueue<Element: QueueLinked>: Sequence {
  private var head: Element?
  private var tail: Element?

  init() {}

  var isEmpty: Bool { head == nil }

  mutating func append(_ element: Element) {
    element.link.next = nil
    if let tail { tail.link.next = element } else { head = element }
    tail = element
  }

  /// Takes `element` out, wherever it is; does nothing if it is not queued here.
  mutating func remove(_ element: Element) {
    var previous: Element?
    var current = head
    while let candidate = current, candidate !== element {
      previous = candidate
      current = candidate.link.next
    }
    guard current != nil else { return }
    if let previous { previous.link.next = element.link.next } else { head = element.link.next }
    if tail === element { tail = previous }
    element.link.next = nil
  }

  func first(where predicate: (Element) -> Bool) -> Element? {
    var current = head
    while let element = current, !predicate(element) { current = element.link.next }
    return current
  }

  /// Takes the first element out; `nil` if there is none.
  mutating func removeFirst() -> Element? {
    guard let element = head else { return nil }
    head = element.link.next
    if head == nil { tail = nil }
    element.link.next = nil
    return element
  }

  func makeIterator() -> Iterator { Iterator(current: head) }

  struct Iterator: IteratorProtocol {
    var current: Element?

    mutating func next() -> Element? {
      defer { current = current?.link.next }
      return current
    }
  }
}

extension LinkedQueue: CallerBatch {}
