import MainOnce
import MainOnceFixtureSupport
import Testing

/// The deadlock detector's settings for this test process, applied by every suite whose tests
/// wait for initializers here.
///
/// Several tests hold the main queue on purpose, in an initializer that waits until other
/// callers have queued up behind it, and they run in parallel with tests whose own main-queue
/// work then waits. On a loaded two-core machine (under ThreadSanitizer above all) that takes
/// seconds, and the watchdog would rightly report it. No test in this process asks for a
/// report: each report the watchdog can give is tested in a fixture process with its own
/// settings. So this process raises the stall timeout above any deliberate hold (each bounded
/// at 10 s, scaled), while a real hang (which the tests' own time limits catch sooner) is
/// still reported.
struct TestProcessSettings: SuiteTrait, TestScoping {
  static let stallTimeout = Duration.seconds(30).scaled

  func provideScope(
    for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
  ) async throws {
    DeadlockDetection.stallTimeout = Self.stallTimeout
    try await function()
  }
}

extension Trait where Self == TestProcessSettings {
  /// This suite's tests wait for initializers in the test process (see ``TestProcessSettings``).
  static var testProcessSettings: Self { Self() }
}
