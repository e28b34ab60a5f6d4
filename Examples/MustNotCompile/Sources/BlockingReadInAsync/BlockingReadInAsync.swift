import MainOnce

enum Counters {
  static let shared = MainLazy { 42 }
}

nonisolated func total() async -> Int {
  // error: property 'value' is unavailable from asynchronous contexts: a read before the
  // value is built would block a thread of the cooperative pool. `await Counters.shared.get()`
  // suspends instead.
  Counters.shared.value
}
