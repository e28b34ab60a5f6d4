/// A table from thread ids to objects, for the wait-for graph: open addressing on the id itself.
///
/// A `Dictionary` hashes every key with SipHash; a first call records and removes its wait and
/// looks up the thread in its way, so that cost about a tenth of what a first call adds to its
/// hop. Thread ids are small, distinct integers: their low bits spread well enough.
struct ThreadTable<Value: AnyObject>: Sequence, ExpressibleByDictionaryLiteral {
  private var slots: [Slot]
  private var count = 0
  private var used = 0

  private enum Slot {
    case empty
    case removed
    case filled(ThreadID, Value)
  }

  init() {
    slots = Array(repeating: .empty, count: 16)
  }

  init(dictionaryLiteral elements: (ThreadID, Value)...) {
    self.init()
    for (key, value) in elements { self[key] = value }
  }

  subscript(key: ThreadID) -> Value? {
    get {
      var index = Self.start(key, in: slots.count)
      while true {
        switch slots[index] {
        case .empty: return nil
        case .filled(let found, let value) where found == key: return value
        case .filled, .removed: index = (index + 1) & (slots.count - 1)
        }
      }
    }
    set { updateValue(newValue, forKey: key) }
  }

  /// Sets or removes the value for `key`; returns the one it replaces.
  @discardableResult
  mutating func updateValue(_ value: Value?, forKey key: ThreadID) -> Value? {
    var index = Self.start(key, in: slots.count)
    var free: Int?
    while true {
      switch slots[index] {
      case .empty:
        guard let value else { return nil }
        let target = free ?? index
        if free == nil { used += 1 }
        slots[target] = .filled(key, value)
        count += 1
        if used * 2 > slots.count { rehash(capacity: Swift.max(16, count * 4)) }
        return nil
      case .filled(let found, let old) where found == key:
        slots[index] = value.map { .filled(key, $0) } ?? .removed
        if value == nil { count -= 1 }
        return old
      case .removed:
        if free == nil { free = index }
        fallthrough
      case .filled:
        index = (index + 1) & (slots.count - 1)
      }
    }
  }

  var keys: [ThreadID] { map(\.key) }

  var values: [Value] { map(\.value) }

  func makeIterator() -> some IteratorProtocol<(key: ThreadID, value: Value)> {
    slots.lazy.compactMap { slot -> (key: ThreadID, value: Value)? in
      if case .filled(let key, let value) = slot { (key, value) } else { nil }
    }.makeIterator()
  }

  private mutating func rehash(capacity: Int) {
    let old = self
    slots = Array(repeating: .empty, count: capacity.nextPowerOfTwo)
    count = 0
    used = 0
    for (key, value) in old { self[key] = value }
  }

  private static func start(_ key: ThreadID, in capacity: Int) -> Int {
    Int(truncatingIfNeeded: key.rawValue &* -0x61c8_8647) & (capacity - 1)
  }
}

extension Int {
  fileprivate var nextPowerOfTwo: Int { 1 << (Int.bitWidth - (self - 1).leadingZeroBitCount) }
}
