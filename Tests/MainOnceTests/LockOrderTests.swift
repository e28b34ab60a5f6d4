import Testing

@testable import MainOnce

// Debug builds only: release builds check nothing (the AddressSanitizer step runs the tests in
// release).
#if DEBUG
  @Suite("Debug builds stop a thread that takes MainOnce's locks out of order")
  struct LockOrderTests {
    @Test("locks taken in rank order, and one after another, pass")
    func rankOrderPasses() {
      let outer = Lock(rank: .waitBoard)
      let inner = Lock(rank: .onceCell)
      let taken = outer.withLock { inner.withLock { true } }
      // Released in turn: the same lock, and a lower rank, may be taken again.
      let again = inner.withLock { true } && outer.withLock { inner.withLock { true } }
      #expect(taken && again)
    }

    /// The body of an exit test of `inversionStops`, in the exit test's process.
    private static func inversionStopsInItsProcess() async throws {
      boundExitTest()
      let cell = Lock(rank: .onceCell)
      let board = Lock(rank: .waitBoard)
      cell.withLock { board.withLock {} }
    }

    @Test(
      "a lock of a lower rank, taken while one of a higher rank is held, stops the process",
      .exitTest)
    func inversionStops() async {
      #if compiler(>=6.2)
        let result = await #expect(
          processExitsWith: .failure, observing: [\.standardErrorContent]
        ) {
          try await Self.inversionStopsInItsProcess()
        }
      #else
        let result = await expectProcessExit(.failure) {
          try await Self.inversionStopsInItsProcess()
        }
      #endif
      let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
      #expect(
        text.contains(
          "MainOnce: internal inconsistency: lock order: taking the waitBoard lock while holding"
            + " [\"onceCell\"]"), "\(text)")
    }

    /// The body of an exit test of `sameRankStops`, in the exit test's process.
    private static func sameRankStopsInItsProcess() async throws {
      boundExitTest()
      let first = Locked(0)
      let second = Locked(0)
      first.withLock { _ in second.withLock { _ in } }
    }

    @Test("two locks of the same rank, one inside the other, stop the process", .exitTest)
    func sameRankStops() async {
      #if compiler(>=6.2)
        let result = await #expect(
          processExitsWith: .failure, observing: [\.standardErrorContent]
        ) {
          try await Self.sameRankStopsInItsProcess()
        }
      #else
        let result = await expectProcessExit(.failure) {
          try await Self.sameRankStopsInItsProcess()
        }
      #endif
      let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
      #expect(text.contains("lock order: taking the leaf lock while holding [\"leaf\"]"), "\(text)")
    }
  }
#endif
