import MainOnce
import Testing

/// A token whose initializer calls `onceOnMain` for itself.
enum SelfCallingInitializer {
  static let token = MainOnceToken("self-calling")

  // The calls below sit one and two lines after `runLine`.
  static let runLine: UInt = #line
  static func run() {
    onceOnMain(token: token) {
      onceOnMain(token: token) {}
    }
  }
}

@Suite("Re-entrance")
struct ReentranceTests {
  /// The body of an exit test of `reentranceStopsTheProcess`, in the exit test's process.
  private static func reentranceStopsTheProcessInItsProcess() async throws {
    boundExitTest()
    SelfCallingInitializer.run()
  }

  @Test("an initializer that calls its own token stops with both call sites", .exitTest)
  func reentranceStopsTheProcess() async throws {
    #if compiler(>=6.2)
      let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        try await Self.reentranceStopsTheProcessInItsProcess()
      }
    #else
      let result = await expectProcessExit(.failure) {
        try await Self.reentranceStopsTheProcessInItsProcess()
      }
    #endif
    let standardError = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    let outer = SelfCallingInitializer.runLine + 2
    let inner = SelfCallingInitializer.runLine + 3
    #expect(standardError.contains("MainOnce: re-entrant call for token \"self-calling\""))
    #expect(standardError.contains("the call at MainOnceTests/ReentranceTests.swift:\(inner)"))
    #expect(
      standardError.contains("initializer started at MainOnceTests/ReentranceTests.swift:\(outer)"))
  }
}
