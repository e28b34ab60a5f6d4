import Foundation

@testable import MainOnce

/// A counting semaphore for tasks: `take()` suspends, without blocking a thread, until one of
/// the slots is free; waiting tasks get them in the order they asked.
final class TaskSlots: Sendable {
  private struct State {
    var free: Int
    var waiting: [CheckedContinuation<Void, Never>] = []
  }
  // A pthread mutex, not `Mutex`: ThreadSanitizer does not see the futex `Mutex` locks with on
  // Linux.
  private let state: Locked<State>

  init(_ count: Int) { state = Locked(State(free: count)) }

  func take() async {
    await withCheckedContinuation { continuation in
      let taken = state.withLock { state in
        guard state.free > 0 else {
          state.waiting.append(continuation)
          return false
        }
        state.free -= 1
        return true
      }
      if taken { continuation.resume() }
    }
  }

  func give() {
    let next = state.withLock { state in
      guard !state.waiting.isEmpty else {
        state.free += 1
        return nil as CheckedContinuation<Void, Never>?
      }
      return state.waiting.removeFirst()
    }
    next?.resume()
  }
}
