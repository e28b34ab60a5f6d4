import Foundation
import MainOnceFixtureSupport
import Testing

@testable import MainOnce

/// The deadlock detector, one fixture process per scenario: each needs the main queue to itself.
///
/// What the tests check about time is what MainOnce promises: a stall is reported once a caller
/// has waited at least a stall timeout, and stopped (with `abort`) only after at least two.
/// Upper bounds only catch a report that never comes: the scenarios hold each state for a
/// scaled time (``TimeScale``), and a report must come while it lasts.
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
    ])
  func trackedCycle(_ scenario: String, _ operation: String) async throws {
    let (lines, edges) = try await stoppedTwoWayCycle(scenario)
    let edge =
      #/^  thread \d+( \(holds the main queue\))? waits for .+ in .+ at MainOnceFixture/DeadlockScenarios\.swift:\d+; blocked by thread \d+, which (holds the main queue|runs that queue)$/#
    #expect(edges.allSatisfy { $0.wholeMatch(of: edge) != nil }, "\(edges)")
    #expect(
      edges.contains { $0.contains("waits for queue \"loader\" in \(operation)") })
    #expect(
      edges.contains { $0.contains("waits for the initializer of token \"deadlock scenario\"") })
    #expect(lines.dropFirst(3).first?.hasPrefix("hint: ") == true)
  }

  /// Runs `scenario`, which MainOnce must stop as a deadlock of two waits, and returns the
  /// stopping report's lines and its two edges.
  private func stoppedTwoWayCycle(_ scenario: String) async throws -> (
    lines: [String], edges: ArraySlice<String>
  ) {
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
    return (lines, edges)
  }

  /// MainOnce cannot see into a `withTrackedWait` closure, which may compute, sleep or return:
  /// a cycle through it is reported, one line per edge, and never stops the process.
  @Test(
    "a withTrackedWait on the main queue for its caller is reported with one line per edge",
    arguments: ["trackedCycleMainRunsFirst", "trackedCycleMainRunsAndCloses"])
  func opaqueCycle(_ scenario: String) async throws {
    let outcome = try await run(scenario, ["FIXTURE_TIMEOUT": "2"])
    #expect(!outcome.standardError.contains("Fatal error"), "\(outcome.standardError)")
    // Still waiting when the fixture's own limit (2 s, scaled) ended it.
    #expect(outcome.verdict.hasPrefix("FAIL timed out after "), "\(outcome.verdict)")
    let lines = outcome.standardError.split(separator: "\n").map(String.init)
    let start = try #require(
      lines.firstIndex { $0.hasPrefix("MainOnce: possible deadlock, not stopped: ") },
      "\(outcome.standardError)")
    #expect(lines[start].contains("cannot see into withTrackedWait(for:) at "))
    let edges = lines[(start + 1)...].prefix { $0.hasPrefix("  ") }
    #expect(edges.count == 2, "\(outcome.standardError)")
    #expect(edges.contains { $0.contains("waits for work \"loader\" in withTrackedWait(for:)") })
    #expect(
      edges.contains { $0.contains("waits for the initializer of token \"deadlock scenario\"") })
    // Reported once.
    #expect(lines.filter { $0.hasPrefix("MainOnce: possible deadlock") }.count == 1)
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
    // Once the caller had waited a stall timeout, while the main queue still blocked.
    #expect(report.waited >= 1.0, "reported after \(report.waited) s")
    #expect(report.waited < TimeScale.seconds(3), "reported after \(report.waited) s")
    #expect(
      report.text.contains(" s in onceOnMain(token:) at MainOnceFixture/DeadlockScenarios.swift:"))
    #expect(report.text.contains("the main queue is held by thread"))
    #expect(report.text.contains("which is blocked in futex"))
    // Nothing observed says whom the main queue waits for: the report must not guess.
    #expect(!outcome.standardError.contains("probably"))
    // The end is reported with the wait's length: as long as the caller measured it, give or
    // take the moments each took to notice the end (and a twentieth, rounding to a tenth).
    let end = try #require(
      outcome.standardError.firstMatch(
        of: #/MainOnce: the initializer of token [^\n]* finished after (\d+\.\d) s/#),
      "\(outcome.standardError)")
    let lasted = try #require(Double(end.output.1))
    let waited = try #require(callerWait(in: outcome.standardOutput), "\(outcome.standardOutput)")
    #expect(lasted >= report.waited, "ended after \(lasted) s")
    #expect(
      abs(lasted - waited) <= TimeScale.seconds(0.5) + 0.05,
      "ended after \(lasted) s; the caller waited \(waited) s")
  }

  @Test(
    "a main queue blocked without progress for a whole timeout stops the process when stalls abort",
    arguments: ["rawSemaphore", "neverServed"])
  func stallAborts(_ scenario: String) async throws {
    let outcome = try await run(scenario, ["MAINONCE_STALL": "abort"])
    #expect(outcome.status != 0)
    #expect(!outcome.standardOutput.contains("PASS"))
    // Reported at the first look; stopped at the next, a timeout later at the earliest, once the
    // thread in the way has not run at all in between.
    let report = try #require(stallReport(in: outcome.standardError))
    #expect(report.waited >= 1.0, "first reported after \(report.waited) s")
    let lines = try #require(
      stoppingReport(in: outcome.standardError, from: "MainOnceFixture/DeadlockScenarios.swift"),
      "\(outcome.standardError)")
    #expect(lines.first?.hasPrefix("MainOnce: thread ") == true)
    let stopped = try #require(stallReport(in: lines.joined(separator: "\n")))
    #expect(stopped.waited >= 2.0, "stopped after \(stopped.waited) s: two stall timeouts at least")
    #expect(
      stopped.waited >= report.waited + 1.0 - 0.1,
      "stopped \(stopped.waited) s in, not a stall timeout after the report at \(report.waited) s")
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
    let outcome = try await run(scenario, ["MAINONCE_STALL": "abort"])
    #expect(outcome.status == 0, "\(outcome.standardError)")
    #expect(outcome.verdict == "PASS initializer ran: true")
    #expect(outcome.standardError.contains(state))
    #expect(!outcome.standardError.contains("Fatal error"))
  }

  /// A main thread that sleeps and never drains may run a loop of its own (SDL, GLib): calling
  /// `dispatchMain()` there would move main-queue work off the main thread.
  @Test("a main thread that sleeps instead of serving is told to drain with MainQueueDriver too")
  func sleepingMainHint() async throws {
    let outcome = try await run("sleepingMain")
    #expect(outcome.status == 0, "\(outcome.standardError)")
    let hint = try #require(
      outcome.standardError.split(separator: "\n").first { $0.hasPrefix("hint: ") },
      "\(outcome.standardError)")
    #expect(hint.contains("MainQueueDriver.drain()"), "\(hint)")
    #expect(hint.contains("dispatchMain() or RunLoop.main.run()"), "\(hint)")
  }

  @Test("where /proc cannot be read, stalls that abort are reported, say why, and go on")
  func stallAbortWithoutProc() async throws {
    let outcome = try await run(
      "rawSemaphore", ["MAINONCE_STALL": "abort", "MAINONCE_PROC": "off"])
    #expect(outcome.status == 0, "\(outcome.standardError)")
    #expect(outcome.verdict == "PASS initializer ran: true")
    #expect(
      outcome.standardError.contains(
        "MainOnce cannot read /proc/self/task, so it cannot tell a stuck thread from a slow one:"
          + " it does not stop the process"), "\(outcome.standardError)")
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
    let outcome = try await run(scenario, ["MAINONCE_STALL": "abort"])
    #expect(outcome.status == 0, "\(outcome.standardError)")
    #expect(outcome.verdict == verdict)
    #expect(!outcome.standardError.contains("deadlock detected"))
  }

  @Test("a main queue that makes progress while blocked is never stopped, even when stalls abort")
  func progressingMainQueue() async throws {
    let outcome = try await run("progressingMainQueue", ["MAINONCE_STALL": "abort"])
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
        "in await AsyncMainLazy.get() at MainOnceFixture/DeadlockScenarios.swift:"
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
    #expect(report.waited >= 1.0, "reported after \(report.waited) s")
  }

  @Test("a wait that never initializes, for an initializer that waits for it, stops with its edge")
  func waitCycle() async throws {
    let (_, edges) = try await stoppedTwoWayCycle("waitCycle")
    #expect(
      edges.contains {
        $0.contains("waits for the initializer of token \"deadlock scenario\"")
          && $0.contains("in MainOnceToken.wait() at MainOnceFixture/DeadlockScenarios.swift:")
          && $0.hasSuffix(", which runs it")
      }, "\(edges)")
    #expect(
      edges.contains { $0.contains("waits for queue \"loader\" in DispatchSemaphore.wait(for:)") })
  }

  @Test(
    "a wait for a value nobody initializes is reported as a stall, and ends when one does",
    arguments: [
      (
        "waitWithoutInitializer", "in MainOnceToken.wait() at ", "the initializer",
        "onceOnMain(token:)"
      ),
      (
        "asyncLazyWaitWithoutBuild", "in await AsyncMainLazy.wait() at ", "the builder",
        "AsyncMainLazy.get()"
      ),
    ])
  func waitWithoutInitializer(
    _ scenario: String, _ call: String, _ work: String, _ operation: String
  ) async throws {
    let outcome = try await run(scenario)
    #expect(outcome.verdict == "PASS the wait ended", "\(outcome.standardError)")
    let report = try #require(stallReport(in: outcome.standardError), "\(outcome.standardError)")
    #expect(
      report.text.contains(call + "MainOnceFixture/DeadlockScenarios.swift:"), "\(report.text)")
    #expect(report.text.contains("no caller has brought \(work)"), "\(report.text)")
    #expect(report.text.contains("hint: make sure something calls \(operation) for it"))
    #expect(report.waited >= 1.0, "reported after \(report.waited) s")
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

  @Test("durations under a second are printed in milliseconds, longer ones to a tenth of a second")
  func durationsInReports() {
    #expect(formatDuration(20_000_000) == "20 ms")
    #expect(formatDuration(999_999_999) == "999 ms")
    #expect(formatDuration(1_000_000_000) == "1.0 s")
    #expect(formatDuration(2_049_999_999) == "2.0 s")
    #expect(formatDuration(2_050_000_000) == "2.1 s")
  }

  @Test("a stall timeout under a second is taken, and a wait under a second is reported in ms")
  func millisecondsInReports() async throws {
    let outcome = try await run("rawSemaphore", ["MAINONCE_STALL_TIMEOUT": "0.02"])
    #expect(!outcome.standardError.contains("ignoring MAINONCE_STALL_TIMEOUT"))
    let report = try #require(stallReport(in: outcome.standardError))
    #expect(report.waited >= 0.02, "reported after \(report.waited) s")
    // Reported at the first look after 20 ms, which a loaded machine may delay past a second:
    // then the wait is printed in seconds, as it must be.
    let unit = report.waited < 1 ? #/has waited \d+ ms in /# : #/has waited \d+\.\d s in /#
    #expect(report.text.firstMatch(of: unit) != nil, "\(report.text)")
  }

  @Test("lowering the stall timeout takes effect at once, for a wait in progress")
  func loweredStallTimeout() async throws {
    let outcome = try await run("loweredStallTimeout")
    #expect(outcome.verdict == "PASS initializer ran: true", "\(outcome.standardError)")
    // Lowered from an hour to 100 ms while the caller waits: reported at once, not an hour in
    // (the main queue blocks for 3 s, scaled, and the report must come meanwhile).
    let report = try #require(stallReport(in: outcome.standardError))
    #expect(report.waited >= 0.1, "reported after \(report.waited) s")
    #expect(report.waited < TimeScale.seconds(3), "reported after \(report.waited) s")
  }

  @Test("a tracked wait for work that does not need the main queue is no cycle")
  func unrelatedTrackedWait() async throws {
    // The caller waits for the main queue as long as the main queue waits for the work, about
    // half a second: a stall timeout above that, however slow the machine, so that only a cycle
    // report could break the silence.
    let outcome = try await run(
      "unrelatedTrackedWait",
      ["MAINONCE_STALL": "abort", "MAINONCE_STALL_TIMEOUT": "\(TimeScale.seconds(30))"])
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
    // Still waiting when the fixture's own limit (2 s, scaled) ended it.
    #expect(outcome.verdict.hasPrefix("FAIL timed out after "), "\(outcome.verdict)")
  }

  @Test("MAINONCE_DEADLOCK=off with MAINONCE_STALL=off reports nothing")
  func offPoliciesAreSilent() async throws {
    let outcome = try await run(
      "rawSemaphore", ["MAINONCE_DEADLOCK": "off", "MAINONCE_STALL": "off"])
    #expect(outcome.status == 0)
    #expect(outcome.standardError.isEmpty)
  }

  /// One setting per response: the cycle policy says nothing about stalls. A main queue that
  /// blocks in a raw semaphore wait, and recovers, is reported and never stopped unless
  /// `MAINONCE_STALL=abort` asks for it, however the cycle policy is set.
  @Test(
    "MAINONCE_DEADLOCK leaves stalls reported: a main queue that recovers from a raw wait finishes",
    arguments: ["abort", "report", "off"])
  func cyclePolicyLeavesStallsReported(_ policy: String) async throws {
    let outcome = try await run(
      "rawSemaphore", ["MAINONCE_DEADLOCK": policy, "MAINONCE_STALL_TIMEOUT": "0.3"])
    #expect(outcome.status == 0, "\(outcome.standardError)")
    #expect(outcome.verdict == "PASS initializer ran: true")
    let report = try #require(stallReport(in: outcome.standardError), "\(outcome.standardError)")
    #expect(report.waited >= 0.3, "reported after \(report.waited) s")
    #expect(!outcome.standardError.contains("Fatal error"), "\(outcome.standardError)")
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

  @Test("the watchdog says a reported stall ended before any of its callers goes on")
  func stallEndedBeforeCallersGoOn() async throws {
    let outcome = try await run("stallEndedBeforeCallerGoesOn")
    #expect(outcome.verdict == "PASS the callers returned", "\(outcome.standardError)")
    let text = outcome.standardError
    let ended = try #require(text.range(of: "finished after"), "no end of stall in \(text)")
    let returned = try #require(text.range(of: "CALLER returned"), "\(text)")
    #expect(ended.lowerBound < returned.lowerBound, "\(text)")
  }

  @Test("a main queue that computes, then blocks, is reported again and stopped when stalls abort")
  func busyThenBlocked() async throws {
    let outcome = try await run("busyThenBlocked", ["MAINONCE_STALL": "abort"])
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

  /// A timeout that applies is told from the default by a report that comes no earlier: 1.5 s
  /// (the default would report at 1 s). One it cannot take leaves the default, a second: the
  /// report comes no earlier than that (not at 0.4 ms), and does come (not after a day).
  @Test(
    "MAINONCE_STALL_TIMEOUT sets the stall timeout; a value it cannot take is ignored with a warning",
    arguments: [
      ("1.5", 1.5, true), ("0.0004", 1.0, false), ("1e10", 1.0, false), ("0x10", 1.0, false),
      ("-1", 1.0, false), ("inf", 1.0, false), ("100000", 1.0, false),
    ])
  func stallTimeoutFromEnvironment(_ setting: String, _ timeout: Double, _ applies: Bool)
    async throws
  {
    let outcome = try await run("rawSemaphore", ["MAINONCE_STALL_TIMEOUT": setting])
    #expect(outcome.verdict == "PASS initializer ran: true", "\(outcome.standardError)")
    let report = try #require(stallReport(in: outcome.standardError))
    #expect(report.waited >= timeout, "reported after \(report.waited) s")
    #expect(
      outcome.standardError.contains("MainOnce: ignoring MAINONCE_STALL_TIMEOUT=\(setting)")
        == !applies)
  }

  @Test("settings made in code apply, and the report handler receives stall reports")
  func configuredInCode() async throws {
    let outcome = try await run("configuredInCode")
    #expect(outcome.status != 0)
    #expect(outcome.standardOutput.contains("HANDLER stall MainOnce: thread "))
    let report = try #require(stallReport(in: outcome.standardError))
    // The handler got the first look's report; the second look, two 300 ms timeouts in at the
    // earliest, stopped the process.
    #expect(report.waited >= 0.6, "stopped after \(report.waited) s")
    let lines = stoppingReport(
      in: outcome.standardError, from: "MainOnceFixture/DeadlockScenarios.swift")
    #expect(lines?.first?.hasPrefix("MainOnce: thread ") == true, "\(outcome.standardError)")
  }

  /// How long the scenario's last caller waited, as it measured it (`CALLER waited … s`).
  private func callerWait(in text: String) -> Double? {
    text.firstMatch(of: #/CALLER waited ([0-9.e-]+) s/#).flatMap { Double($0.output.1) }
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
