import MainOnceFixtureSupport
import Testing

/// What MainOnce reads of the platform, checked in a process of its own
/// (`MainOnceFixture platform facts`): the same scenario `Scripts/arm64.sh` runs on arm64 under
/// emulation, here on the platform the tests run on.
@Suite("Platform facts")
struct PlatformFactsTests {
  @Test("thread ids, libdispatch's queue layout and a hop read as MainOnce expects")
  func factsHold() async throws {
    let outcome = try await FixtureProcess.scenario("platform", "facts")
    #expect(!outcome.timedOut, "\(outcome.standardError)")
    #expect(outcome.verdict.hasPrefix("PASS"), "\(outcome.verdict)\n\(outcome.standardError)")
    #expect(outcome.status == 0)
    #expect(outcome.standardError.isEmpty, "\(outcome.standardError)")
    for (key, value) in [
      ("tid", "ok"), ("layoutCheck", "0"), ("layoutSelfTest", "0"), ("sideTables", "read"),
      ("exact", "true"),
      ("nestedSync", "true"),
    ] {
      #expect(outcome.value(key) == value, "\(key): \(outcome.verdict)")
    }
    // Either path is correct; which one ran depends on the kernel (and any seccomp filter).
    #expect(
      ["membarrier", "seqcst"].contains(outcome.value("barrier") ?? ""), "\(outcome.verdict)")
  }
}
