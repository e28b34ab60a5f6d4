import Dispatch
import Foundation
import MainOnce
import XCTest

/// XCTest on Linux runs test methods on the main thread, with the main queue bound to it and
/// served only while a test waits for an expectation.
final class XCTestMainThreadTests: XCTestCase {
  enum Tokens {
    static let inline = MainOnceToken("xctest inline")
    static let hop = MainOnceToken("xctest hop")
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
    wait(for: [done], timeout: 10)
    XCTAssertEqual(ranOnMainThread.get(), true)
  }
}

private final class ResultBox: @unchecked Sendable {
  // This is safe because the value is written on the main thread before `fulfill()` and read
  // after `wait(for:timeout:)` on the same thread.
  private var value: Bool?
  func set(_ value: Bool) { self.value = value }
  func get() -> Bool? { value }
}
