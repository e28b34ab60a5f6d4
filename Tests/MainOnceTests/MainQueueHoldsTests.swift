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
}
