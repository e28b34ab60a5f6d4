import Dispatch
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
/// by ``mainQueueHold``), and keeps it below the time limit of every test's main-queue work
/// (10 s, scaled): a wait that fails a test on a loaded machine has been reported by then, and
/// the report in the log says who held the main queue and what it did.
struct TestProcessSettings: SuiteTrait {
  static let stallTimeout = Duration.seconds(8).scaled

  /// The longest a test in this process may hold the main queue on purpose (scaled): half the
  /// time limit every other test's main-queue work has (10 s, scaled). When a test that holds it
  /// fails, so that nothing releases it, it fails alone: the suites running beside it get the
  /// main queue back before their own limits. It is long enough for what a holding test waits
  /// for meanwhile (other callers queueing up behind it), which on a loaded machine took over
  /// 2 s: a shorter bound let go of the main queue before they had queued, and failed a test
  /// that only the load had slowed.
  static let mainQueueHold = Duration.seconds(5).scaled

}

#if compiler(>=6.1)
  extension TestProcessSettings: TestScoping {
    func provideScope(
      for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
      DeadlockDetection.stalls = .report(after: Self.stallTimeout)
      try await function()
    }
  }
#else
  // Swift Testing before 6.1 has no scoping traits: the setting is made as the suite is
  // prepared, before its tests run, which is all the scope above does.
  extension TestProcessSettings {
    func prepare(for test: Test) async throws {
      DeadlockDetection.stalls = .report(after: Self.stallTimeout)
    }
  }
#endif

extension Trait where Self == TestProcessSettings {
  /// This suite's tests wait for initializers in the test process (see ``TestProcessSettings``).
  static var testProcessSettings: Self { Self() }
}
