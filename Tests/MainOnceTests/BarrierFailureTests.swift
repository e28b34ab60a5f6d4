import MainOnceFixtureSupport
import Testing

/// `membarrier` registered when the process was loaded and failing later (a seccomp filter the
/// program installs): the wait board must fall back to sequentially consistent reads, and a
/// real cycle of tracked waits must still be stopped, with one warning about the barrier. Each
/// scenario runs in `MainOnceFixture barrier <scenario>`, which installs a real filter.
@Suite("A heavy barrier that fails after load")
struct BarrierFailureTests {
  @Test(
    "a cycle through semaphore.wait(for:) and onceOnMain is stopped, and the failure said once",
    arguments: ["filterFirst", "publishedFirst"])
  func cycleIsStopped(_ scenario: String) async throws {
    let outcome = try await FixtureProcess.scenario("barrier", scenario)
    let output = "\(outcome.standardOutput)\(outcome.standardError)"
    #expect(!outcome.timedOut, "\(output)")
    #expect(outcome.standardOutput.contains("FILTER membarrier fails with errno 38"), "\(output)")
    // Stopped: neither a verdict of the scenario's nor its watchdog's.
    #expect(outcome.verdict == "(no verdict)", "\(output)")
    #expect(outcome.status != 0, "\(output)")
    #expect(outcome.standardError.contains("MainOnce: deadlock detected"), "\(output)")
    #expect(
      outcome.standardOutput.contains("HANDLER cycle stops=true MainOnce: deadlock detected"),
      "\(output)")
    let warnings = outcome.standardOutput.split(separator: "\n").filter {
      $0.hasPrefix("HANDLER warning stops=false MainOnce: membarrier failed with errno 38")
    }
    #expect(warnings.count == 1, "\(output)")
    #expect(warnings.first?.contains("trackedSync") == true, "\(output)")
    #expect(!outcome.standardOutput.contains("HANDLER stall"), "\(output)")
  }
}
