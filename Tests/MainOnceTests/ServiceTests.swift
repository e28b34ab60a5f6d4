import Foundation
import Testing

/// The `service` policy, one fixture process per scenario: each needs the main queue to itself.
@Suite("Waits that serve initializers")
struct ServiceTests {
  private func run(_ scenario: String, _ environment: [String: String] = [:]) async throws
    -> FixtureProcess.Outcome
  { try await FixtureProcess.scenario("service", scenario, environment: environment) }

  @Test(
    "a main-queue wait runs, in place, the initializer its worker waits for, and ends normally",
    arguments: [
      ("workerFirst", [:]), ("mainFirst", [:]), ("mainFirstGroup", [:]),
      ("fromEnvironment", ["MAINONCE_DEADLOCK": "service"]),
    ] as [(String, [String: String])])
  func servicedCycleCompletes(_ scenario: String, _ environment: [String: String]) async throws {
    let outcome = try await run(scenario, environment)
    #expect(outcome.status == 0, "\(outcome.standardError)")
    #expect(
      outcome.verdict == "PASS the wait ended runs=1 insideTheWait=1 inMainContext=1 done=true")
    #expect(!outcome.standardError.contains("deadlock detected"))
  }

  /// They cannot be interrupted, and serve nothing: under `service`, a deadlock through
  /// `withTrackedWait`, which MainOnce cannot see into, is reported and waits on.
  @Test("withTrackedWait in main-queue code serves no initializer: its deadlock is reported")
  func withTrackedWaitServesNothing() async throws {
    let outcome = try await run("trackedWaitWorkerFirst", ["FIXTURE_TIMEOUT": "2"])
    #expect(outcome.verdict.hasPrefix("FAIL timed out after "), "\(outcome.verdict)")
    #expect(
      outcome.standardError.contains(
        "MainOnce: possible deadlock, not stopped: MainOnce cannot see into withTrackedWait(for:)"),
      "\(outcome.standardError)")
    #expect(!outcome.standardError.contains("Fatal error"))
  }

  @Test("an initializer that throws while serviced throws to its own caller")
  func throwingInitializer() async throws {
    let outcome = try await run("throwingInitializer")
    #expect(outcome.status == 0, "\(outcome.standardError)")
    #expect(outcome.verdict.hasPrefix("PASS the worker caught its own error runs=1"))
    #expect(outcome.verdict.hasSuffix("done=false"))
  }

  @Test("eight workers racing with a serviced wait run the initializer once")
  func race() async throws {
    let outcome = try await run("race")
    #expect(
      outcome.verdict == "PASS the wait ended runs=1 insideTheWait=1 inMainContext=1 done=true",
      "\(outcome.standardError)")
  }

  @Test(
    "a cycle that no initializer can break, or that a blocked wait cannot serve, still stops",
    arguments: [
      ("unbreakable", "no MainOnce initializer on it waits to run on the main queue"),
      ("runningInitializerWaits", "no MainOnce initializer on it waits to run on the main queue"),
      (
        "uninterruptibleSync",
        "the main-queue wait on it cannot be interrupted to run the initializer"
      ),
    ])
  func unbreakableCycleStops(_ scenario: String, _ why: String) async throws {
    let outcome = try await run(scenario)
    #expect(outcome.status != 0)
    let lines = try #require(
      stoppingReport(in: outcome.standardError, from: "MainOnceFixture/ServiceScenarios.swift"),
      "\(outcome.standardError)")
    #expect(lines.first == "MainOnce: deadlock detected")
    #expect(
      lines.contains(
        "  the service policy cannot break this cycle: " + why
          + {
            why.hasPrefix("the main-queue wait")
              ? ": once blocked, only DispatchSemaphore.wait(for:) and DispatchGroup.wait(for:)"
                + " serve initializers" : ""
          }()), "\(lines)")
  }

  @Test("the demo's proven cycle completes under the service policy and stops by default")
  func demoCycle() async throws {
    let serviced = try await FixtureProcess.run(
      "MainOnceDemo", ["deadlock", "cycle"], environment: ["MAINONCE_DEADLOCK": "service"])
    #expect(serviced.status == 0, "\(serviced.standardError)")
    #expect(serviced.standardOutput.contains("the main queue built the stack while it waited"))
    let stopped = try await FixtureProcess.run("MainOnceDemo", ["deadlock", "cycle"])
    #expect(stopped.status != 0)
    #expect(stopped.standardError.contains("Fatal error: MainOnce: deadlock detected"))
  }
}
