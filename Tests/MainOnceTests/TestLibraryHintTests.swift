import Dispatch
import Foundation
import Testing

@testable import MainOnce

/// The watchdog's hint for a test that blocks the main queue names the test library's own way
/// to wait. XCTest's side is in `XCTestMainThreadTests`, which runs in the XCTest process.
@Suite("Hints for tests")
struct TestLibraryHintTests {
  enum Tokens {
    static let blockedMainActor = MainOnceToken("blocked main actor in Swift Testing")
  }

  @Test("MainOnce tells that this test runner runs Swift Testing")
  func swiftTestingRunner() {
    #expect(Platform.isTestRunner)
    #expect(Platform.isSwiftTestingRunner)
  }

  /// The body of an exit test of `blockedMainActor`, in the exit test's process.
  private static func blockedMainActorInItsProcess() async throws {
    boundExitTest(seconds: 120)
    DeadlockDetection.stalls = .report(after: .milliseconds(100))
    let reported = DispatchSemaphore(value: 0)
    DeadlockDetection.reportHandler = { report in
      FileHandle.standardError.write(Data((report.text + "\n").utf8))
      reported.signal()
    }
    let returned = DispatchSemaphore(value: 0)
    // As in a `@MainActor` test: Swift Testing's runner has called dispatchMain(), so this
    // runs on a worker thread, which holds the main queue while it runs.
    await MainActor.run {
      DispatchQueue.global().async {
        onceOnMain(token: Tokens.blockedMainActor) {}
        returned.signal()
      }
      // Blocks the main queue, so that the worker's hop cannot run, until the watchdog
      // reports; the time limit above bounds the wait.
      reported.wait()
    }
    returned.wait()
  }

  @Test(
    "main-actor code of a Swift Testing test blocked in a semaphore gets Swift Testing's hint",
    .exitTest)
  func blockedMainActor() async {
    #if compiler(>=6.2)
      let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
        try await Self.blockedMainActorInItsProcess()
      }
    #else
      let result = await expectProcessExit(.success) {
        try await Self.blockedMainActorInItsProcess()
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(text.contains("which is blocked in futex"), "\(text)")
    #expect(
      text.contains("hint: in a Swift Testing test, don't block the main actor on work that needs"),
      "\(text)")
    #expect(!text.contains("XCTestExpectation"), "\(text)")
  }
}
