import Dispatch
import Foundation
import MainOnceFixtureSupport
import XCTest

@testable import MainOnce

/// XCTest on Linux runs test methods on the main thread, with the main queue bound to it and
/// served only while a test waits for an expectation.
final class XCTestMainThreadTests: XCTestCase {
  enum Tokens {
    static let inline = MainOnceToken("xctest inline")
    static let hop = MainOnceToken("xctest hop")
    static let blockedTest = MainOnceToken("xctest blocked test")
  }

  func testCallFromTheTestMethodRunsInPlace() {
    var ranOnMainThread = false
    onceOnMain(token: Tokens.inline) { ranOnMainThread = Thread.isMainThread }
    XCTAssertTrue(ranOnMainThread)
  }

  func testBackgroundCallHopsWhileTheTestWaits() {
    let done = expectation(description: "background caller returned")
    let ranOnMainThread = ResultBox()
    DispatchQueue.global().async {
      onceOnMain(token: Tokens.hop) { ranOnMainThread.set(Thread.isMainThread) }
      done.fulfill()
    }
    wait(for: [done], timeout: TimeScale.seconds(10))
    XCTAssertEqual(ranOnMainThread.get(), true)
  }
}

extension XCTestMainThreadTests {
  /// A test that blocks the main thread in a semaphore while a worker waits for the main queue
  /// is told to wait the test framework's way, not to call dispatchMain(). XCTest runs before
  /// the Swift Testing suites, one test at a time, so the settings changed here affect no
  /// other test.
  func testStallReportInATestNamesTheTestFrameworksWaits() {
    let reports = Recorder<String>()
    DeadlockDetection.reportHandler = { reports.record($0.text) }
    DeadlockDetection.stalls = .report(after: .milliseconds(100))
    defer {
      DeadlockDetection.reportHandler = nil
      DeadlockDetection.stalls = .report(after: .seconds(1))
    }
    let done = expectation(description: "the worker's call returned")
    DispatchQueue.global().async {
      onceOnMain(token: Tokens.blockedTest) {}
      done.fulfill()
    }
    // Blocks the main thread, which holds the main queue: the worker's hop cannot run, and the
    // watchdog (scaled: it takes longer to get there on a loaded machine) reports it.
    _ = DispatchSemaphore(value: 0).wait(timeout: .now() + TimeScale.seconds(0.6))
    // Serves the main queue: the hop runs.
    wait(for: [done], timeout: TimeScale.seconds(10))
    let text = reports.recorded.joined(separator: "\n")
    XCTAssertTrue(text.contains("the main thread holds the main queue but is not serving it"), text)
    XCTAssertTrue(text.contains("hint: in a test, wait the way the test framework serves"), text)
    XCTAssertFalse(text.contains("dispatchMain() or RunLoop.main.run()"), text)
    XCTAssertTrue(text.contains("XCTestExpectation"), text)
    XCTAssertFalse(text.contains("Swift Testing"), text)
  }

  /// The XCTest run is told apart from the Swift Testing run of the same test bundle.
  func testMainOnceTellsThatXCTestRuns() {
    XCTAssertTrue(Platform.isTestRunner)
    XCTAssertFalse(Platform.isSwiftTestingRunner)
  }
}

private final class ResultBox: @unchecked Sendable {
  // This is safe because the value is written on the main thread before `fulfill()` and read
  // after `wait(for:timeout:)` on the same thread.
  private var value: Bool?
  func set(_ value: Bool) { self.value = value }
  func get() -> Bool? { value }
}
