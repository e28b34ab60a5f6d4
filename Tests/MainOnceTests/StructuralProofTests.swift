import Foundation
import MainOnceFixtureSupport
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// The deadlock detector stops a process only on a structural proof: a cycle whose every edge
/// is an untimed wait MainOnce performs itself. Anything else (a closure it cannot see into, a
/// wait with a deadline, what `/proc` says, timing) is reported at most, and a program that
/// would recover does. One fixture process per scenario (`MainOnceFixture detector …`).
///
/// Bounds only catch what never comes, and are scaled (``TimeScale``); assertions about time say
/// what is promised ("stopped, not timed out", "within the new timeout of the change, give or
/// take a scaled second").
@Suite("Deadlock stops need a structural proof")
struct StructuralProofTests {
  private static let fixtureFile = "MainOnceFixture/DetectorScenarios.swift"

  private func run(_ scenario: String, _ environment: [String: String] = [:]) async throws
    -> FixtureProcess.Outcome
  { try await FixtureProcess.scenario("detector", scenario, environment: environment) }

  @Test(
    "a program that would recover by itself is never stopped",
    arguments: [
      // The waiter performs the job it waits for: it is not its own blocker.
      ("helperPerformsTheJob", [:], "PASS the helper finished the job"),
      ("helperPerformsTheJobGroup", [:], "PASS the helper finished the job"),
      // A wait for work ends when any performer finishes it.
      ("firstOfTwoPerformers", [:], "PASS the first performer finished; the other one: success"),
      // A closure MainOnce cannot see into ends its wait by itself, after the stall timeout.
      ("trackedWaitEndsByItself", [:], "PASS the wait ended: timedOut; the worker: success"),
      ("trackedWaitEndsByItselfSoon", [:], "PASS the wait ended: timedOut; the worker: success"),
      // A signalled semaphore wait looks blocked from outside until its thread wakes up.
      ("signalThenSyncOnMain", ["MAINONCE_DEADLOCK": "service"], "PASS 3000 rounds"),
      ("signalThenRunOnceOnMain", ["MAINONCE_DEADLOCK": "service"], "PASS 3000 rounds"),
    ] as [(String, [String: String], String)])
  func recoveringProgramsFinish(
    _ scenario: String, _ environment: [String: String], _ verdict: String
  ) async throws {
    let outcome = try await run(scenario, environment)
    #expect(!outcome.timedOut)
    #expect(outcome.status == 0, "\(outcome.standardError)")
    #expect(outcome.verdict == verdict, "\(outcome.standardError)")
    #expect(!outcome.standardError.contains("deadlock detected"), "\(outcome.standardError)")
    #expect(!outcome.standardError.contains("Fatal error"))
  }

  /// Waits whose possible enders MainOnce cannot all name: a second performer of the work that
  /// starts, or signals, after the look; a thread captured in one job of libdispatch's pool
  /// that later runs another. Each round forms the cycle in the graph for 100 ms or more before
  /// the signal; none may be stopped, beside eight threads that only spin.
  @Test(
    "a wait for work, or for a pool thread, is never stopped: it recovers, also beside load",
    arguments: ["laterPerformer", "laterPerformerGroup", "signalAfterPerform", "poolThreadTarget"])
  func openTargetsRecover(_ scenario: String) async throws {
    let outcome = try await run(
      scenario, ["FIXTURE_HOGS": "8", "FIXTURE_ROUNDS": "2", "FIXTURE_TIMEOUT": "40"])
    #expect(!outcome.timedOut)
    #expect(outcome.status == 0, "\(outcome.standardError)")
    #expect(outcome.verdict.hasPrefix("PASS 2 rounds ended"), "\(outcome.standardError)")
    // The shape needs the next job on the captured thread: libdispatch drains a serial queue's
    // jobs on one thread, one after another.
    #expect(!outcome.verdict.hasSuffix("sameThread=0/2"), "\(outcome.verdict)")
    #expect(!outcome.standardError.contains("deadlock detected"), "\(outcome.standardError)")
    #expect(!outcome.standardError.contains("Fatal error"))
  }

  /// The main thread runs only the program's own code, also while it holds the main queue:
  /// a target captured there by top-level code names the one thread that can signal it.
  @Test("a wait for the main thread, captured by top-level code, closes a cycle that is stopped")
  func mainThreadTargetIsProven() async throws {
    let outcome = try await run("mainThreadTarget", ["FIXTURE_TIMEOUT": "10"])
    #expect(!outcome.timedOut)
    #expect(outcome.status != 0)
    #expect(!outcome.standardOutput.contains("PASS"), "\(outcome.standardOutput)")
    let lines = try #require(
      stoppingReport(in: outcome.standardError, from: Self.fixtureFile),
      "\(outcome.standardError)")
    #expect(lines.first == "MainOnce: deadlock detected", "\(lines)")
    #expect(
      lines.contains { $0.contains(" in DispatchSemaphore.wait(for:) at \(Self.fixtureFile):") },
      "\(lines)")
  }

  @Test("a stall timeout raised after the first report spares a main queue that recovers")
  func raisedStallTimeout() async throws {
    let outcome = try await run("raisedStallTimeout")
    #expect(!outcome.timedOut)
    #expect(outcome.status == 0, "\(outcome.standardError)")
    #expect(outcome.verdict == "PASS initializer ran: true", "\(outcome.standardError)")
    // The first report came under the 1 s timeout (scaled), and raised it to 10 s: the main
    // queue blocks three of the first timeouts (at most 8 s) in all, so no later look may stop it.
    #expect(outcome.standardOutput.contains("HANDLER stall stops=false MainOnce: "))
    #expect(!outcome.standardOutput.contains("stops=true"), "\(outcome.standardOutput)")
    #expect(!outcome.standardError.contains("Fatal error"), "\(outcome.standardError)")
  }

  @Test(
    "a cycle through a wait MainOnce cannot see into is reported with both edges, not stopped",
    arguments: [
      ("trackedWaitEndsByItself", "withTrackedWait(for:)"),
      ("timedWaitEndsByItself", "DispatchSemaphore.wait(for:timeout:)"),
    ])
  func opaqueCycleIsReported(_ scenario: String, _ operation: String) async throws {
    let outcome = try await run(scenario, ["FIXTURE_REPORT_HANDLER": "1"])
    #expect(!outcome.timedOut)
    #expect(outcome.status == 0, "\(outcome.standardError)")
    #expect(outcome.verdict == "PASS the wait ended: timedOut; the worker: success")
    #expect(
      outcome.standardOutput.contains("HANDLER cycle stops=false MainOnce: possible deadlock"),
      "\(outcome.standardOutput)")
    #expect(!outcome.standardOutput.contains("stops=true"))
    let lines = outcome.standardError.split(separator: "\n").map(String.init)
    let start = try #require(
      lines.firstIndex { $0.hasPrefix("MainOnce: possible deadlock") },
      "\(outcome.standardError)")
    let edges = lines[(start + 1)...].prefix { $0.hasPrefix("  ") }
    #expect(edges.count == 2, "\(edges)")
    let site = "at \(Self.fixtureFile):"
    #expect(
      edges.contains {
        $0.contains(" (holds the main queue) waits for work \"loader\" in \(operation) \(site)")
          && $0.hasSuffix(", which performs it")
      }, "\(edges)")
    #expect(
      edges.contains {
        $0.contains(" waits for the initializer of token \"detector scenario\" (")
          && $0.contains(" in onceOnMain(token:) \(site)")
          && $0.hasSuffix(", which holds the main queue")
      }, "\(edges)")
    #expect(!outcome.standardError.contains("deadlock detected"))
    #expect(!outcome.standardError.contains("Fatal error"))
  }

  @Test("a cycle of untimed tracked waits closed by the worker stops without /proc")
  func cycleStopsWithoutProc() async throws {
    let outcome = try await run(
      "cycleClosedByWorker", ["MAINONCE_PROC": "off", "FIXTURE_TIMEOUT": "5"])
    try expectStoppedCycle(outcome)
  }

  /// The same with `/proc` really hidden (`unshare -Urm`, a tmpfs over `/proc`), where this
  /// machine allows it: nothing MainOnce reads there may decide the stop.
  @Test(
    "a cycle of untimed tracked waits closed by the worker stops with /proc hidden",
    .enabled("unshare -Urm can mount over /proc here", canHideProc))
  func cycleStopsWithProcHidden() async throws {
    let fixture = FixtureProcess.productsDirectory.appendingPathComponent("MainOnceFixture").path
    let outcome = try await FixtureProcess.run(
      "/usr/bin/unshare",
      ["-Urm", "/bin/sh", "-c", "mount -t tmpfs none /proc && exec \"$0\"", fixture],
      environment: [
        "FIXTURE_DETECTOR_SCENARIO": "cycleClosedByWorker", "FIXTURE_TIMEOUT": "5",
      ])
    try expectStoppedCycle(outcome)
  }

  private func expectStoppedCycle(
    _ outcome: FixtureProcess.Outcome, sourceLocation: SourceLocation = #_sourceLocation
  ) throws {
    #expect(!outcome.timedOut, sourceLocation: sourceLocation)
    #expect(
      !outcome.standardOutput.contains("PASS"), "\(outcome.standardOutput)",
      sourceLocation: sourceLocation)
    #expect(
      !outcome.standardOutput.contains("FAIL timed out"), "\(outcome.standardError)",
      sourceLocation: sourceLocation)
    #expect(outcome.status != 0, sourceLocation: sourceLocation)
    let lines = try #require(
      stoppingReport(in: outcome.standardError, from: Self.fixtureFile),
      "\(outcome.standardError)", sourceLocation: sourceLocation)
    #expect(lines.first == "MainOnce: deadlock detected", sourceLocation: sourceLocation)
    let edges = lines.dropFirst().prefix { $0.hasPrefix("  ") }
    #expect(edges.count == 2, "\(edges)", sourceLocation: sourceLocation)
    #expect(
      edges.allSatisfy { $0.contains(" in DispatchSemaphore.wait(for:) at \(Self.fixtureFile):") },
      "\(edges)", sourceLocation: sourceLocation)
  }

  /// The promise is 1 ms from the signal to the wait's return. On a loaded machine the
  /// scheduler alone may take longer to wake any thread, so what is held to the promise is what
  /// the tracked wait adds to a plain semaphore wait measured in interleaved rounds beside it:
  /// the difference of the medians of 50 rounds each (scaled).
  @Test("under service, a signalled main-queue semaphore wait returns within a millisecond")
  func serviceSignalLatency() async throws {
    let outcome = try await run("serviceSignalLatency", ["MAINONCE_DEADLOCK": "service"])
    #expect(outcome.status == 0, "\(outcome.standardError)")
    let median = try #require(outcome.value("median").flatMap { Double($0) }, "\(outcome.verdict)")
    let plain = try #require(
      outcome.value("plainMedian").flatMap { Double($0) }, "\(outcome.verdict)")
    #expect(median - plain <= 1_000 * TimeScale.factor, "in µs: \(outcome.verdict)")
  }

  @Test(
    "under service, a main-queue semaphore or group wait runs queued initializers whatever the graph says",
    arguments: ["serviceUnlinkedSemaphore", "serviceUnlinkedGroup"])
  func serviceServesUnlinkedWaits(_ scenario: String) async throws {
    let outcome = try await run(
      scenario, ["MAINONCE_DEADLOCK": "service", "FIXTURE_TIMEOUT": "5"])
    #expect(outcome.status == 0, "\(outcome.standardError)")
    #expect(outcome.verdict == "PASS the wait ended; insideTheWait=true", "\(outcome.verdict)")
  }

  @Test("a lowered stall timeout applies to a stall in progress, and the stop quotes it")
  func loweredStallTimeoutApplies() async throws {
    let outcome = try await run("loweredStallTimeoutAfterReport")
    #expect(!outcome.timedOut)
    #expect(outcome.status != 0)
    #expect(!outcome.standardOutput.contains("PASS"))
    // Reported under the 3 s timeout; the handler lowered it to 100 ms at once.
    let first = try #require(waited(in: outcome.standardError), "\(outcome.standardError)")
    #expect(first >= 3.0, "first reported after \(first) s")
    let lines = try #require(
      stoppingReport(in: outcome.standardError, from: Self.fixtureFile),
      "\(outcome.standardError)")
    let stopped = try #require(waited(in: lines.joined(separator: "\n")), "\(lines)")
    // Within max(grace period, 100 ms) of the change, give or take a scaled second for the handler
    // to run and a loaded machine: not a look scheduled under the old 3 s.
    #expect(
      stopped <= first + 0.1 + TimeScale.seconds(1),
      "stopped \(stopped) s in, reported \(first) s in")
    #expect(lines.contains { $0.contains("100 ms") }, "\(lines)")
  }

  @Test("a report handler stuck on one report holds back no other, and a cycle still stops")
  func stuckReportHandler() async throws {
    let outcome = try await run("stuckReportHandler", ["FIXTURE_TIMEOUT": "10"])
    #expect(!outcome.timedOut)
    #expect(!outcome.standardOutput.contains("PASS"))
    #expect(!outcome.standardOutput.contains("FAIL"), "\(outcome.standardOutput)")
    #expect(outcome.status != 0)
    #expect(outcome.standardOutput.contains("HANDLER stall stops=false MainOnce: "))
    #expect(
      outcome.standardOutput.contains("HANDLER cycle stops=true MainOnce: deadlock detected"),
      "\(outcome.standardOutput)\n\(outcome.standardError)")
    #expect(
      stoppingReport(in: outcome.standardError, from: Self.fixtureFile)?.first
        == "MainOnce: deadlock detected", "\(outcome.standardError)")
    // The same facts as fields: the stall names the token and its waiting thread; the cycle
    // names the wait that found it and both of its threads.
    let stall = try #require(
      outcome.standardOutput.firstMatch(
        of:
          #/FIELDS stall site=MainOnceFixture/DetectorScenarios\.swift:\d+ threads=(\d+)(,\d+)* label=(.*)\n/#
      ),
      "\(outcome.standardOutput)")
    #expect(stall.3.contains("detector scenario"), "\(stall.3)")
    let cycle = try #require(
      outcome.standardOutput.firstMatch(
        of:
          #/FIELDS cycle site=MainOnceFixture/DetectorScenarios\.swift:\d+ threads=(\d+),(\d+) label=none\n/#
      ),
      "\(outcome.standardOutput)")
    #expect(cycle.1 != cycle.2)
  }

  @Test("a settings warning goes to the report handler once one is set, not to standard error")
  func warningThroughHandler() async throws {
    let outcome = try await run("warningThroughHandler", ["MAINONCE_STALL_TIMEOUT": "bogus"])
    #expect(outcome.status == 0, "\(outcome.standardOutput)\n\(outcome.standardError)")
    #expect(
      outcome.standardOutput.contains(
        "HANDLER warning stops=false MainOnce: ignoring MAINONCE_STALL_TIMEOUT=bogus"),
      "\(outcome.standardOutput)")
    #expect(!outcome.standardError.contains("ignoring"), "\(outcome.standardError)")
  }

  /// Threads that sleep do not switch; each context switch of an idle thread is a wakeup, which
  /// a loaded machine does not add. The control runs the same program with a bare hop to the
  /// main queue instead of `onceOnMain`: libdispatch's own threads are in both, and so is a
  /// sanitizer's background thread, which wakes on a timer of its own (ThreadSanitizer's, about
  /// every 100 ms): in the same window such a thread wakes once more or once less from one run to
  /// the next. So the threads that woke are compared one for one, busiest first: none may wake
  /// that stayed asleep in the control, and each may wake at most once more than its
  /// counterpart did, which a thread waking on a timer of MainOnce's (ten times a second or so)
  /// or a thread of MainOnce's own would not pass.
  @Test("an idle process that has used MainOnce has no thread of MainOnce's and no extra wakeups")
  func idleProcess() async throws {
    let control = try await run("idleWithoutMainOnce")
    let used = try await run("idleAfterFirstCall")
    #expect(control.status == 0, "\(control.standardOutput)")
    #expect(used.status == 0, "\(used.standardOutput)")
    let controlThreads = try #require(control.value("threads").flatMap { Int($0) })
    let usedThreads = try #require(used.value("threads").flatMap { Int($0) })
    let controlWakeups = try wakeupsPerThread(control)
    let usedWakeups = try wakeupsPerThread(used)
    let context = "\(used.verdict); without MainOnce: \(control.verdict)"
    #expect(usedThreads <= controlThreads, "\(context)")
    #expect(usedWakeups.count <= controlWakeups.count, "a thread woke that did not: \(context)")
    for (usedCount, controlCount) in zip(usedWakeups, controlWakeups) {
      #expect(usedCount <= controlCount + 1, "\(context)")
    }
  }

  /// How often each thread that woke did, busiest first, from `busy=<thread>:<switches>,…`.
  private func wakeupsPerThread(_ outcome: FixtureProcess.Outcome) throws -> [Int] {
    let busy = try #require(outcome.value("busy"), "\(outcome.verdict)")
    return busy.split(separator: ",").compactMap {
      $0.split(separator: ":").last.flatMap { Int($0) }
    }
    .sorted(by: >)
  }

  /// How long the first `MainOnce: … has waited …` line in `text` says a caller had waited, in
  /// seconds.
  private func waited(in text: String) -> Double? {
    guard
      let match = text.firstMatch(
        of:
          #/MainOnce: (?:thread \d+|\d+ callers) ha(?:s|ve) waited (?:up to )?(\d+(?:\.\d)?) (ms|s)/#
      ),
      let number = Double(match.output.1)
    else { return nil }
    return match.output.2 == "ms" ? number / 1_000 : number
  }
}

/// Whether this machine lets an unprivileged process hide `/proc` from a child:
/// `unshare -Urm` and a tmpfs mounted over it.
@Sendable private func canHideProc() async -> Bool {
  guard FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare") else { return false }
  let outcome = try? await FixtureProcess.run(
    "/usr/bin/unshare", ["-Urm", "/bin/sh", "-c", "mount -t tmpfs none /proc"],
    timeout: .seconds(10))
  return outcome?.status == 0
}
