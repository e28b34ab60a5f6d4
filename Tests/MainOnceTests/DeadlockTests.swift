import Foundation
import Testing

/// The deadlock detector, one fixture process per scenario: each needs the main queue to itself.
@Suite("Deadlock detection")
struct DeadlockTests {
  private func run(_ scenario: String, _ environment: [String: String] = [:]) async throws
    -> FixtureProcess.Outcome
  { try await FixtureProcess.scenario("deadlock", scenario, environment: environment) }

  @Test(
    "a tracked wait on the main queue for its caller stops with one line per edge",
    arguments: [
      ("trackedCycleMainFirst", "DispatchSemaphore.wait(for:)"),
      ("trackedCycleWorkerFirst", "DispatchSemaphore.wait(for:)"),
      // Computes in its wait first: proven once it sleeps there.
      ("trackedCycleMainRunsFirst", "withTrackedWait(for:)"),
      ("trackedCycleMainRunsAndCloses", "withTrackedWait(for:)"),
    ])
  func trackedCycle(_ scenario: String, _ operation: String) async throws {
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
      edges.contains { $0.contains("waits for work \"loader\" in \(operation)") })
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
    #expect(
      lines?.first?.hasPrefix(
        "MainOnce: DispatchQueue.trackedSync at MainOnceFixture/DeadlockScenarios.swift:") == true,
      "\(outcome.standardError)")
    #expect(
      outcome.standardError.contains(
        "on the main queue would wait for this thread itself: thread "))
    #expect(outcome.standardError.contains("holds the main queue (it runs that queue's work)"))
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
    // Nothing observed says whom the main queue waits for: the report must not guess.
    #expect(!outcome.standardError.contains("probably"))
    // The end is reported with the wait's length: the 3 s the main queue blocked, less the
    // time the caller's thread took to start after the block began (tens of ms under TSan).
    let end = try #require(
      outcome.standardError.firstMatch(
        of: #/MainOnce: the initializer of token [^\n]* finished after (\d+\.\d) s/#),
      "\(outcome.standardError)")
    let lasted = try #require(Double(end.output.1))
    #expect((2.7...3.3).contains(lasted), "ended after \(lasted) s")
  }

  @Test(
    "a main queue blocked without progress for a whole timeout stops the process when stalls abort",
    arguments: ["rawSemaphore", "neverServed"])
  func stallAborts(_ scenario: String) async throws {
    let outcome = try await run(scenario, ["MAINONCE_DEADLOCK": "abort"])
    #expect(outcome.status != 0)
    #expect(!outcome.standardOutput.contains("PASS"))
    // Reported at the first look; stopped at the next, a timeout later, once the thread in the
    // way has not run at all in between.
    let report = try #require(stallReport(in: outcome.standardError))
    #expect((1.0...1.5).contains(report.waited), "first reported after \(report.waited) s")
    let lines = try #require(
      stoppingReport(in: outcome.standardError, from: "MainOnceFixture/DeadlockScenarios.swift"),
      "\(outcome.standardError)")
    #expect(lines.first?.hasPrefix("MainOnce: thread ") == true)
    let stopped = try #require(stallReport(in: lines.joined(separator: "\n")))
    #expect((2.0...2.6).contains(stopped.waited), "stopped after \(stopped.waited) s")
    #expect(
      lines.contains { $0.hasSuffix("blocked in futex (a lock, semaphore or condition wait)") })
    #expect(lines.contains("  it has not run at all in the last 1.0 s"), "\(lines)")
  }

  @Test("a main thread that holds the main queue without serving it is reported as such")
  func notServingIsReported() async throws {
    let outcome = try await run("neverServed")
    #expect(outcome.status == 0)
    #expect(
      outcome.standardError.contains(
        "the main thread holds the main queue but is not serving it: it has not called dispatchMain() and runs no RunLoop.main or MainQueueDriver loop; it is blocked in futex"
      ), "\(outcome.standardError)")
    #expect(outcome.standardError.contains("hint: serve the main queue"))
  }

  @Test(
    "after RunLoop.main.run(until:) served the main queue, a blocked main thread is not called unserved"
  )
  func servedThenBlocked() async throws {
    let outcome = try await run("servedThenBlocked")
    #expect(outcome.verdict == "PASS initializer ran: true", "\(outcome.standardError)")
    #expect(outcome.standardOutput.contains("the run loop served the main queue"))
    let report = try #require(stallReport(in: outcome.standardError))
    #expect(report.text.contains("the main thread holds the main queue but is not serving it"))
    #expect(!outcome.standardError.contains("never"), "\(outcome.standardError)")
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

  @Test(
    "a tracked wait that can end is no deadlock: with a deadline, signalled, released, or running",
    arguments: [
      ("timedTrackedWaits", "PASS timed waits: timedOut, timedOut; the worker finished"),
      // The worker's initializer ran: the caller that finishes the scenario found it done.
      ("signalledTrackedWait", "PASS initializer ran: false"),
      // The main queue's wait was signalled, but its thread has not removed it yet.
      ("releasedTrackedWait", "PASS 400 rounds"),
      // The main queue's thread computes in its wait, and never sleeps there.
      ("runningTrackedWait", "PASS initializer ran: false"),
      // The same, when the main queue's wait closes the cycle.
      ("runningTrackedWaitCloses", "PASS initializer ran: false"),
    ])
  func waitsThatCanEndAreNoDeadlock(_ scenario: String, _ verdict: String) async throws {
    let outcome = try await run(scenario, ["MAINONCE_DEADLOCK": "abort"])
    #expect(outcome.status == 0, "\(outcome.standardError)")
    #expect(outcome.verdict == verdict)
    #expect(!outcome.standardError.contains("deadlock detected"))
  }

  @Test("a main queue that makes progress while blocked is never stopped, even when stalls abort")
  func progressingMainQueue() async throws {
    let outcome = try await run("progressingMainQueue", ["MAINONCE_DEADLOCK": "abort"])
    #expect(outcome.status == 0, "\(outcome.standardError)")
    #expect(outcome.verdict == "PASS initializer ran: true")
    #expect(!outcome.standardError.contains("Fatal error"))
    #expect(!outcome.standardError.contains("probably"))
  }

  @Test(
    "a form that does not block reports a main queue that is not served, as the blocking form does",
    arguments: [
      ("neverServedAsync", "a task has waited ", "in await onceOnMain(token:) at "),
      ("neverServedCompletion", "a completion handler has waited ", "in onceOnMain(token:) at "),
      (
        "neverServedAsyncLazy", "a task has waited ",
        "in await AsyncMainLazy.value for the builder of AsyncMainLazy<Int>"
      ),
    ])
  func nonBlockingFormsReport(_ scenario: String, _ who: String, _ call: String) async throws {
    let outcome = try await run(scenario)
    #expect(outcome.status == 0, "\(outcome.standardError)")
    #expect(outcome.verdict.hasPrefix("PASS"))
    let report = try #require(stallReport(in: outcome.standardError), "\(outcome.standardError)")
    #expect(report.text.contains(who), "\(report.text)")
    #expect(report.text.contains(call), "\(report.text)")
    #expect(report.text.contains("the main thread holds the main queue but is not serving it"))
    #expect((1.0...1.5).contains(report.waited), "reported after \(report.waited) s")
  }

  @Test("callers of one stalled initializer get one report that lists them")
  func manyWaitersOneReport() async throws {
    let outcome = try await run("manyWaiters")
    #expect(outcome.verdict == "PASS initializer ran: false", "\(outcome.standardError)")
    let report = try #require(stallReport(in: outcome.standardError))
    #expect(report.text.hasPrefix("MainOnce: 65 callers have waited up to "), "\(report.text)")
    #expect(
      report.text.contains(
        #/\n  threads \d+, \d+, \d+, \d+ and 59 more in onceOnMain\(token:\) at MainOnceFixture/DeadlockScenarios\.swift:\d+/#
      ),
      "\(report.text)")
    #expect(
      outcome.standardError.components(separatedBy: "MainOnce: ").count == 3,
      "one report and its end")
  }

  @Test("a stall timeout under a second is reported in milliseconds")
  func millisecondsInReports() async throws {
    let outcome = try await run("rawSemaphore", ["MAINONCE_STALL_TIMEOUT": "0.02"])
    let report = try #require(stallReport(in: outcome.standardError))
    #expect(report.text.firstMatch(of: #/has waited \d+ ms in /#) != nil, "\(report.text)")
    #expect((0.02...0.2).contains(report.waited))
  }

  @Test("lowering the stall timeout takes effect at once, for a wait in progress")
  func loweredStallTimeout() async throws {
    let outcome = try await run("loweredStallTimeout")
    #expect(outcome.verdict == "PASS initializer ran: true", "\(outcome.standardError)")
    // Lowered about 300 ms into the wait, to 100 ms: reported at once, not 15 s in.
    let report = try #require(stallReport(in: outcome.standardError))
    #expect((0.1...1.5).contains(report.waited), "reported after \(report.waited) s")
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
    #expect(outcome.standardError.contains("queue introspection is off"))
    #expect(
      outcome.standardError.contains(
        "a caller that runs inside a queue.sync nested in a main-queue block holds the main queue"
          + " itself"))
    #expect(outcome.standardError.contains("MainOnce cannot read which one holds it"))
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
    #expect(
      report.text.contains(
        "the main thread holds the main queue and is idle in poll, waiting for events in an event loop of its own, which does not serve the main queue"
      ), "\(report.text)")
    #expect(
      report.text.contains(
        "hint: serve the main queue from that loop with MainQueueDriver: watch MainQueueDriver.fileDescriptor and call MainQueueDriver.drain() when it is readable"
      ))
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
    #expect(report.text.contains("the initializer has run on thread"))
    #expect(report.text.contains("it is sleeping"))
    // One report for the cell, listing its caller and the second caller.
    #expect(report.text.hasPrefix("MainOnce: 2 callers have waited up to "), "\(report.text)")
    #expect(outcome.standardError.components(separatedBy: " waited ").count == 2)
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
    // The handler got the first look's report; the second look stopped the process.
    #expect((0.6...1.0).contains(report.waited), "stopped after \(report.waited) s")
    let lines = stoppingReport(
      in: outcome.standardError, from: "MainOnceFixture/DeadlockScenarios.swift")
    #expect(lines?.first?.hasPrefix("MainOnce: thread ") == true, "\(outcome.standardError)")
  }

  /// The first stall report in `text`, with how long it says the oldest caller had waited, in
  /// seconds.
  private func stallReport(in text: String) -> (text: String, waited: Double)? {
    guard
      let match = text.firstMatch(
        of:
          #/MainOnce: (?:thread \d+|a task|a completion handler|\d+ callers) ha(?:s|ve) waited (?:up to )?(\d+(?:\.\d)?) (ms|s)[^\n]*(?:\n  [^\n]*)*\nhint: [^\n]*/#
      ),
      let number = Double(match.output.1)
    else { return nil }
    return (String(match.output.0), match.output.2 == "ms" ? number / 1_000 : number)
  }
}
