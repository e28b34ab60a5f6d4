import Foundation
import Testing

/// The deadlock detector, one fixture process per scenario: each needs the main queue to itself.
@Suite("Deadlock detection")
struct DeadlockTests {
  /// Runs `MainOnceFixture deadlock <scenario>`.
  private func run(_ scenario: String, _ environment: [String: String] = [:]) async throws
    -> FixtureProcess.Outcome
  {
    try await FixtureProcess.run(
      "MainOnceFixture", ["deadlock", scenario], environment: environment)
  }

  @Test(
    "a tracked wait on the main queue for its caller stops with one line per edge",
    arguments: ["trackedCycleMainFirst", "trackedCycleWorkerFirst"])
  func trackedCycle(_ scenario: String) async throws {
    let outcome = try await run(scenario)
    #expect(!outcome.timedOut)
    #expect(outcome.status != 0)
    #expect(!outcome.standardOutput.contains("PASS"))
    let lines = try #require(
      stoppingReport(in: outcome.standardError, from: "MainOnceFixture/DeadlockScenarios.swift"),
      "\(outcome.standardError)")
    #expect(lines.first == "MainOnce: deadlock detected")
    let edges = lines.dropFirst().prefix { $0.hasPrefix("  ") }
    #expect(edges.count == 2, "\(outcome.standardError)")
    let edge =
      #/^  thread \d+( \(holds the main queue\))? waits for .+ in .+ at MainOnceFixture/DeadlockScenarios\.swift:\d+; blocked by thread \d+, which (holds the main queue|performs it)$/#
    #expect(edges.allSatisfy { $0.wholeMatch(of: edge) != nil }, "\(edges)")
    #expect(
      edges.contains { $0.contains("waits for work \"loader\" in DispatchSemaphore.wait(for:)") })
    #expect(
      edges.contains { $0.contains("waits for the initializer of token \"deadlock scenario\"") })
    #expect(lines.dropFirst(3).first?.hasPrefix("hint: ") == true)
  }

  @Test("main-queue sync from the main queue stops with a report instead of a silent trap")
  func mainQueueSyncFromMain() async throws {
    let outcome = try await run("mainQueueSyncFromMain")
    #expect(outcome.status != 0)
    let lines = stoppingReport(
      in: outcome.standardError, from: "MainOnceFixture/DeadlockScenarios.swift")
    #expect(lines?.first == "MainOnce: deadlock detected", "\(outcome.standardError)")
    #expect(
      outcome.standardError.contains(
        "(holds the main queue) waits for the main queue in DispatchQueue.trackedSync"))
  }

  @Test("a raw semaphore wait on the main queue is reported within the stall timeout")
  func rawSemaphoreIsReported() async throws {
    let outcome = try await run("rawSemaphore")
    #expect(outcome.status == 0, "\(outcome.standardError)")
    #expect(outcome.verdict == "PASS initializer ran: true")
    let report = try #require(stallReport(in: outcome.standardError))
    #expect((1.0...2.0).contains(report.waited), "reported after \(report.waited) s")
    #expect(
      report.text.contains(" s in onceOnMain(token:) at MainOnceFixture/DeadlockScenarios.swift:"))
    #expect(report.text.contains("the main queue is held by thread"))
    #expect(report.text.contains("which is blocked in futex"))
    // The end is reported with the wait's length: the 3 s the main queue blocked, less the
    // time the caller's thread took to start after the block began (tens of ms under TSan).
    let end = try #require(
      outcome.standardError.firstMatch(
        of: #/wait in onceOnMain\(token:\) at [^\n]* ended after (\d+\.\d) s/#),
      "\(outcome.standardError)")
    let lasted = try #require(Double(end.output.1))
    #expect((2.7...3.3).contains(lasted), "ended after \(lasted) s")
  }

  @Test(
    "a blocked main queue stops the process when stalls abort",
    arguments: ["rawSemaphore", "neverServed"])
  func stallAborts(_ scenario: String) async throws {
    let outcome = try await run(scenario, ["MAINONCE_DEADLOCK": "abort"])
    #expect(outcome.status != 0)
    #expect(!outcome.standardOutput.contains("PASS"))
    let report = try #require(stallReport(in: outcome.standardError))
    #expect((1.0...2.0).contains(report.waited))
    #expect(
      outcome.standardError.contains("which is blocked in futex")
        || outcome.standardError.contains("it is blocked in futex"))
    let lines = stoppingReport(
      in: outcome.standardError, from: "MainOnceFixture/DeadlockScenarios.swift")
    #expect(lines?.first?.hasPrefix("MainOnce: thread ") == true, "\(outcome.standardError)")
  }

  @Test("a main queue that was never served is reported as such")
  func neverServedIsReported() async throws {
    let outcome = try await run("neverServed")
    #expect(outcome.status == 0)
    #expect(
      outcome.standardError.contains(
        "the main queue has never been served: the main thread has not started dispatchMain() or RunLoop.main.run(); it is blocked in futex"
      ))
    #expect(outcome.standardError.contains("hint: serve the main queue"))
  }

  @Test(
    "a busy or sleeping main queue is never stopped, even when stalls abort",
    arguments: [("busyMain", "busy running code"), ("sleepingMain", "sleeping (clock_nanosleep)")])
  func noFalsePositives(_ scenario: String, _ state: String) async throws {
    let outcome = try await run(scenario, ["MAINONCE_DEADLOCK": "abort"])
    #expect(outcome.status == 0, "\(outcome.standardError)")
    #expect(outcome.verdict == "PASS initializer ran: true")
    #expect(outcome.standardError.contains(state))
    #expect(!outcome.standardError.contains("Fatal error"))
  }

  @Test("a tracked wait for work that does not need the main queue is no cycle")
  func unrelatedTrackedWait() async throws {
    let outcome = try await run("unrelatedTrackedWait", ["MAINONCE_DEADLOCK": "abort"])
    #expect(outcome.status == 0, "\(outcome.standardError)")
    #expect(outcome.standardError.isEmpty)
  }

  @Test("without queue introspection, a nested sync that can never hop is explained")
  func nestedSyncWithoutIntrospection() async throws {
    let outcome = try await run(
      "nestedSyncWithoutIntrospection", ["MAINONCE_QUEUE_INTROSPECTION": "off"])
    #expect(outcome.verdict == "PASS reported: stall")
    #expect(outcome.standardError.contains("queue introspection is unavailable"))
    #expect(outcome.standardError.contains("inside queue.sync within a main-queue block"))
  }

  @Test("a report handler receives the cycle, and the process still stops")
  func reportHandler() async throws {
    let outcome = try await run("cycleToHandler")
    #expect(outcome.standardOutput.contains("HANDLER cycle MainOnce: deadlock detected"))
    #expect(outcome.status != 0)
  }

  @Test("MAINONCE_DEADLOCK=report reports a cycle and keeps waiting")
  func reportPolicyKeepsWaiting() async throws {
    let outcome = try await run(
      "trackedCycleMainFirst", ["MAINONCE_DEADLOCK": "report", "FIXTURE_TIMEOUT": "2"])
    #expect(outcome.standardError.hasPrefix("MainOnce: deadlock detected\n"))
    #expect(!outcome.standardError.contains("Fatal error"))
    #expect(outcome.verdict == "FAIL timed out after 2 s")
  }

  @Test("MAINONCE_DEADLOCK=off reports nothing")
  func offPolicyIsSilent() async throws {
    let outcome = try await run("rawSemaphore", ["MAINONCE_DEADLOCK": "off"])
    #expect(outcome.status == 0)
    #expect(outcome.standardError.isEmpty)
  }

  @Test("under RunLoop.main.run(), a main queue stuck in a semaphore wait is not called unserved")
  func rawSemaphoreUnderRunLoop() async throws {
    let outcome = try await run("rawSemaphoreUnderRunLoop")
    #expect(outcome.verdict == "PASS initializer ran: true", "\(outcome.standardError)")
    let report = try #require(stallReport(in: outcome.standardError))
    #expect(
      report.text.contains("(the main thread, in RunLoop.main), which is blocked in futex"),
      "\(report.text)")
    #expect(!outcome.standardError.contains("never been served"))
  }

  @Test("a main thread idle in an event loop of its own is reported as not serving the main queue")
  func idleEventLoop() async throws {
    let outcome = try await run("idleEventLoop")
    #expect(outcome.verdict == "PASS initializer ran: true", "\(outcome.standardError)")
    let report = try #require(stallReport(in: outcome.standardError))
    #expect(report.text.contains("(the main thread), which is idle in poll"), "\(report.text)")
    #expect(report.text.contains("runs an event loop that does not serve the main queue"))
  }

  @Test("a main queue that computes, then blocks, is reported again and stopped when stalls abort")
  func busyThenBlocked() async throws {
    let outcome = try await run("busyThenBlocked", ["MAINONCE_DEADLOCK": "abort"])
    #expect(outcome.status != 0)
    let first = try #require(stallReport(in: outcome.standardError))
    #expect(first.text.contains("which is busy running code"), "\(first.text)")
    let lines = try #require(
      stoppingReport(in: outcome.standardError, from: "MainOnceFixture/DeadlockScenarios.swift"),
      "\(outcome.standardError)")
    #expect(lines.first?.hasPrefix("MainOnce: thread ") == true)
    #expect(
      lines.contains {
        $0.hasSuffix("which is blocked in futex (a lock, semaphore or condition wait)")
      })
  }

  @Test("a slow initializer is reported with the thread running it; runOnce(for:) is not watched")
  func slowInitializer() async throws {
    let outcome = try await run("slowInitializer")
    #expect(outcome.verdict == "PASS initializer ran: false", "\(outcome.standardError)")
    let report = try #require(stallReport(in: outcome.standardError))
    #expect(report.text.contains("the initializer is running on thread"))
    #expect(report.text.contains("which is sleeping"))
    // The caller whose initializer it is waits for it as well as the second caller.
    #expect(outcome.standardError.components(separatedBy: " has waited ").count == 3)
    #expect(!outcome.standardError.contains("runOnce(for:)"))
    #expect(outcome.standardError.firstMatch(of: #/\n  thread \d+ waits for/#) == nil)
  }

  @Test(
    "MAINONCE_STALL_TIMEOUT sets the stall timeout; a value it cannot take is ignored with a warning",
    arguments: [
      ("0.3", 0.3...0.9), ("0.0004", 1.0...2.0), ("1e10", 1.0...2.0), ("0x10", 1.0...2.0),
      ("-1", 1.0...2.0), ("inf", 1.0...2.0), ("100000", 1.0...2.0),
    ])
  func stallTimeoutFromEnvironment(_ setting: String, _ expected: ClosedRange<Double>) async throws
  {
    let outcome = try await run("rawSemaphore", ["MAINONCE_STALL_TIMEOUT": setting])
    #expect(outcome.verdict == "PASS initializer ran: true", "\(outcome.standardError)")
    let report = try #require(stallReport(in: outcome.standardError))
    #expect(expected.contains(report.waited), "reported after \(report.waited) s")
    #expect(
      outcome.standardError.contains("MainOnce: ignoring MAINONCE_STALL_TIMEOUT=\(setting)")
        == (expected.lowerBound >= 1))
  }

  @Test("settings made in code apply, and the report handler receives stall reports")
  func configuredInCode() async throws {
    let outcome = try await run("configuredInCode")
    #expect(outcome.status != 0)
    #expect(outcome.standardOutput.contains("HANDLER stall MainOnce: thread "))
    let report = try #require(stallReport(in: outcome.standardError))
    #expect((0.3...0.9).contains(report.waited), "reported after \(report.waited) s")
    let lines = stoppingReport(
      in: outcome.standardError, from: "MainOnceFixture/DeadlockScenarios.swift")
    #expect(lines?.first?.hasPrefix("MainOnce: thread ") == true, "\(outcome.standardError)")
  }

  /// The first stall report in `text`, with how long it says the caller had waited.
  private func stallReport(in text: String) -> (text: String, waited: Double)? {
    guard
      let match = text.firstMatch(
        of: #/MainOnce: thread \d+ has waited (\d+\.\d) s[^\n]*(\n  [^\n]*)*\nhint: [^\n]*/#),
      let waited = Double(match.output.1)
    else { return nil }
    return (String(match.output.0), waited)
  }
}
