import Foundation
import Testing

/// The tests that hold the main queue on purpose take turns (see ``MainQueueTurn``).
@Suite("Tests that hold the main queue take turns")
struct MainQueueHoldsTests {
  @Test("a test that holds the main queue waits until no other one does")
  func holdsTakeTurns() async throws {
    let events = Recorder<String>()
    let first = Task {
      await holdingTheMainQueue { _ in
        events.record("first in")
        try? await Task.sleep(for: .milliseconds(200))
        events.record("first out")
      }
    }
    // Bounds for a hang only: the tests that hold the main queue take their turns too.
    _ = await eventually(timeout: .seconds(60)) { events.recorded == ["first in"] }
    let second = Task {
      await holdingTheMainQueue { _ in events.record("second in") }
    }
    _ = try await withinTimeLimit(.seconds(60)) { await first.value }
    _ = try await withinTimeLimit(.seconds(60)) { await second.value }
    #expect(events.recorded == ["first in", "first out", "second in"])
  }

  @Test("a task started with a turn runs on the turn's executor, not the cooperative pool")
  func turnTasksRunOffThePool() async throws {
    try await holdingTheMainQueue { turn in
      let onTheTurnsExecutor = try await withinTimeLimit {
        try await turn.task { () -> [Bool] in
          let first = HoldExecutor.isCurrent
          // A resumption too: a task keeps its executor preference across suspensions.
          try await Task.sleep(for: .milliseconds(1))
          return [first, HoldExecutor.isCurrent]
        }.value
      }
      #expect(onTheTurnsExecutor == [true, true])
    }
  }
}
