import Foundation
import MainOnceFixtureSupport
import Testing

/// One process per run-loop driver and calling context: the main queue is process-wide.
@Suite("Every run-loop driver and calling context")
struct RunLoopMatrixTests {
  struct Scenario: CustomTestStringConvertible, Sendable {
    let driver: Driver
    let context: CallingContext

    var executable: String { driver == .asyncMain ? "MainOnceAsyncFixture" : "MainOnceFixture" }
    var arguments: [String] {
      driver == .asyncMain ? [context.rawValue] : [driver.rawValue, context.rawValue]
    }
    /// After `dispatchMain()` and after async main's first await, main-queue code runs on worker
    /// threads; under `RunLoop.main.run()` and at top level it runs on the main thread.
    var expectsMainThread: Bool {
      driver == .runLoop || driver == .none || context == .topLevel
    }
    /// Main-queue work items MainOnce sends: callers in main context run in place; eight
    /// racing threads share one hop; with a main-queue caller in the race, that caller may run
    /// the initializer first, and then nobody hops.
    var expectedWorkItems: Set<String> {
      switch context {
      case .background: ["1"]
      case .mixed: ["0", "1"]
      default: ["0"]
      }
    }
    var testDescription: String { "\(driver.rawValue), \(context.rawValue)" }
  }

  static let scenarios: [Scenario] =
    [Driver.dispatchMain, .runLoop].flatMap { driver in
      [CallingContext.topLevel, .mainBlock, .background, .nestedSync, .mixed].map {
        Scenario(driver: driver, context: $0)
      }
    }
    + [CallingContext.topLevel, .mainActor, .background, .nestedSync, .mixed].map {
      Scenario(driver: .asyncMain, context: $0)
    }
    + [Scenario(driver: .none, context: .topLevel)]

  @Test("initializer runs once, in main context, before any caller returns", arguments: scenarios)
  func runsOnceInMainContext(_ scenario: Scenario) async throws {
    let outcome = try await FixtureProcess.run(scenario.executable, scenario.arguments)
    #expect(!outcome.timedOut, "the scenario hung: \(outcome.standardError)")
    #expect(outcome.status == 0, "\(outcome.verdict)\n\(outcome.standardError)")
    #expect(outcome.verdict.hasPrefix("PASS"))
    #expect(outcome.value("exact") == "true", "MainOnce fell back: \(outcome.standardError)")
    #expect(outcome.standardError.isEmpty, "\(outcome.standardError)")
    #expect(outcome.value("runs") == "1")
    #expect(outcome.value("earlyReturns") == "0")
    #expect(outcome.value("mainContext") == "true")
    #expect(outcome.value("mainThread") == String(scenario.expectsMainThread))
    #expect(
      scenario.expectedWorkItems.contains(outcome.value("workItems") ?? "none"),
      "main-queue work items: \(outcome.verdict)")
  }

  @Test(
    "many tokens race with no double run or early return under every driver",
    arguments: [Driver.dispatchMain, .runLoop, .asyncMain])
  func stress(_ driver: Driver) async throws {
    let scenario = Scenario(driver: driver, context: .stress)
    let outcome = try await FixtureProcess.run(
      scenario.executable, scenario.arguments,
      timeout: Stress.isLong ? .seconds(1_200) : .seconds(60))
    #expect(!outcome.timedOut, "the stress hung: \(outcome.standardError)")
    #expect(outcome.status == 0, "\(outcome.verdict)\n\(outcome.standardError)")
    #expect(Int(outcome.value("uses") ?? "") ?? 0 >= (Stress.isLong ? 1_000_000 : 10_000))
    for key in ["doubleRuns", "missedRuns", "earlyReturns", "outsideMainContext"] {
      #expect(outcome.value(key) == "0", "\(key)")
    }
  }

  /// The one context public signals cannot tell apart: a `sync` nested in main-queue code after
  /// `dispatchMain()` or in async main. The caller holds the main queue without knowing it, so its
  /// hop can never start; MainOnce must say so on standard error rather than hang in silence.
  @Test(
    "without queue introspection, a nested sync that can never hop is explained on stderr",
    arguments: [Driver.dispatchMain, .asyncMain])
  func fallbackNestedSyncIsExplained(_ driver: Driver) async throws {
    let scenario = Scenario(driver: driver, context: .nestedSync)
    let outcome = try await FixtureProcess.run(
      scenario.executable, scenario.arguments,
      environment: ["MAINONCE_QUEUE_INTROSPECTION": "off", "MAINONCE_STALL_TIMEOUT": "0.3"],
      timeout: .seconds(4))
    #expect(outcome.timedOut, "the hop cannot start, so the scenario cannot end")
    #expect(outcome.standardError.contains("queue introspection is off"))
    #expect(
      outcome.standardError.contains(
        "a caller that runs inside a queue.sync nested in a main-queue block holds the main queue"
          + " itself"),
      "\(outcome.standardError)")
  }

  @Test(
    "MAINONCE_QUEUE_INTROSPECTION takes the common spellings, and warns about others",
    arguments: [
      ("false", "false", ""), ("OFF", "false", ""), ("0", "false", ""), ("on", "true", ""),
      ("bogus", "true", "MainOnce: ignoring MAINONCE_QUEUE_INTROSPECTION=bogus: use on or off"),
    ])
  func introspectionSetting(_ value: String, _ exact: String, _ warning: String) async throws {
    let outcome = try await FixtureProcess.run(
      "MainOnceFixture", ["dispatchMain", "mixed"],
      environment: ["MAINONCE_QUEUE_INTROSPECTION": value])
    #expect(outcome.verdict.hasPrefix("PASS"), "\(outcome.standardError)")
    #expect(outcome.value("exact") == exact)
    if warning.isEmpty {
      #expect(outcome.standardError.isEmpty, "\(outcome.standardError)")
    } else {
      #expect(outcome.standardError.components(separatedBy: warning).count == 2)
    }
  }

  /// The scenarios whose context public signals can see. A property, not a closure in the
  /// test's arguments: Swift 6.0's compiler crashed type-checking that closure.
  static let fallbackScenarios: [Scenario] = scenarios.filter {
    !($0.context == .nestedSync && ($0.driver == .dispatchMain || $0.driver == .asyncMain))
  }

  /// Where libdispatch's queue state cannot be read, MainOnce must still be right wherever
  /// public signals suffice. (A `sync` nested in a main-queue block after `dispatchMain()` is
  /// the one context they cannot see; the deadlock watchdog covers it.)
  @Test("fallback without queue introspection stays correct", arguments: fallbackScenarios)
  func fallbackStaysCorrect(_ scenario: Scenario) async throws {
    let outcome = try await FixtureProcess.run(
      scenario.executable, scenario.arguments,
      environment: ["MAINONCE_QUEUE_INTROSPECTION": "off"])
    #expect(!outcome.timedOut, "the scenario hung: \(outcome.standardError)")
    #expect(outcome.status == 0, "\(outcome.verdict)\n\(outcome.standardError)")
    #expect(outcome.value("runs") == "1")
    #expect(outcome.value("earlyReturns") == "0")
    #expect(outcome.value("mainContext") == "true")
    #expect(
      scenario.expectedWorkItems.contains(outcome.value("workItems") ?? "none"),
      "main-queue work items: \(outcome.verdict)")
  }
}
