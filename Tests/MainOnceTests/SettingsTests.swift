import Foundation
import MainOnceFixtureSupport
import Synchronization
import Testing

@testable import MainOnce

@Suite("Settings take effect, and queue introspection answers or degrades safely")
struct SettingsTests {
  @Test(
    "switches accept on/off, true/false, yes/no and 1/0 in any case, and nothing else",
    arguments: [
      ("on", true), ("OFF", false), ("true", true), ("False", false), ("yes", true), ("no", false),
      ("1", true), ("0", false), ("bogus", nil), ("", nil), ("of", nil), ("2", nil),
    ] as [(String, Bool?)])
  func switchSpellings(_ text: String, _ expected: Bool?) {
    #expect(Settings.switchValue(text) == expected)
  }

  @Test(
    "durations are plain decimal seconds: no sign, exponent, hexadecimal or special value",
    arguments: [
      ("2", Duration.seconds(2)), ("0.25", .milliseconds(250)), (".5", .milliseconds(500)),
      ("1.", .seconds(1)), ("0.001", .milliseconds(1)), ("86400", .seconds(86_400)),
      ("1e10", nil), ("0x10", nil), ("-1", nil), ("+1", nil), ("inf", nil), ("nan", nil),
      ("", nil), (".", nil), ("1.2.3", nil), (" 1", nil), ("1 ", nil), ("٣", nil),
      ("9999999999", nil),
    ] as [(String, Duration?)])
  func durations(_ text: String, _ expected: Duration?) {
    #expect(Settings.seconds(text) == expected)
  }

  @Test("queue introspection is on when every check passes, silently")
  func introspectionOn() {
    let verdict = QueueOwnership.Verdict.decide(setting: nil, checks: { 0 }, losing: "nothing")
    #expect(verdict == .init(isAvailable: true, warning: nil))
  }

  @Test("turned off by the setting, queue introspection is off without a word")
  func introspectionOffBySetting() {
    let verdict = QueueOwnership.Verdict.decide(
      setting: false,
      checks: {
        Issue.record("the checks ran"); return 0
      }, losing: "nothing")
    #expect(verdict == .init(isAvailable: false, warning: nil))
  }

  @Test(
    "any other fallback is off with a warning that gives the reason",
    arguments: [
      (Int32(3), "failed check 3 of MainOnce's layout self-test"),
      (-1, "only on 64-bit Linux"),
      (QueueOwnership.wrapperCheckFailed, "does not hold its queue where expected"),
    ])
  func introspectionFallbackWarns(_ failedCheck: Int32, _ reason: String) throws {
    let verdict = QueueOwnership.Verdict.decide(
      setting: true, checks: { failedCheck }, losing: "which cannot see the test")
    #expect(!verdict.isAvailable)
    let warning = try #require(verdict.warning)
    #expect(warning.hasPrefix("MainOnce: queue introspection is off: "))
    #expect(warning.contains(reason), "\(warning)")
    #expect(warning.contains("which cannot see the test"))
    #expect(warning.contains("MAINONCE_QUEUE_INTROSPECTION=off"))
  }

  /// The body of an exit test of `firstCallOnlyReadsTheMainQueue`, in the exit test's process.
  private static func firstCallOnlyReadsTheMainQueueInItsProcess() async throws {
    boundExitTest()
    let token = MainOnceToken("first call of a process")
    // A worker's first call: it reads the main queue's layout, and sends a hop.
    let done = DispatchSemaphore(value: 0)
    Thread {
      onceOnMain(token: token) {}
      done.signal()
    }.start()
    guard done.wait(timeout: .now() + TimeScale.seconds(5)) == .success else { exit(2) }
    let confirmed = QueueOwnership.availability.load(ordering: .relaxed)
    let otherQueues = QueueOwnership.queueAvailability.load(ordering: .relaxed)
    // No private queue was made and synced on: the other queues' layout is still unchecked.
    exit(
      confirmed == QueueOwnership.Availability.confirmed.rawValue
        && otherQueues == QueueOwnership.Availability.undecided.rawValue ? 0 : 1)
  }

  @Test(
    "a first call checks the main queue by reading it only, and its hop confirms the owner",
    .exitTest)
  func firstCallOnlyReadsTheMainQueue() async {
    #if compiler(>=6.2)
      await #expect(processExitsWith: .success) {
        try await Self.firstCallOnlyReadsTheMainQueueInItsProcess()
      }
    #else
      await expectProcessExit(.success) {
        try await Self.firstCallOnlyReadsTheMainQueueInItsProcess()
      }
    #endif
  }

  @Test(
    "a test runner is told to wait the test framework's way, any other process to serve the main queue"
  )
  func serveMainQueueHints() {
    #expect(Platform.isTestRunner, "this process runs the tests")
    let inTest = StallCheck.serveMainQueueHint(inTestRunner: true)
    #expect(inTest.contains("XCTestExpectation") && inTest.contains("`await`"))
    #expect(!inTest.contains("dispatchMain()"))
    let elsewhere = StallCheck.serveMainQueueHint(inTestRunner: false)
    #expect(elsewhere.contains("dispatchMain() or RunLoop.main.run()"))
    let swiftTesting = StallCheck.swiftTestingHint
    #expect(swiftTesting.contains("`await`") && swiftTesting.contains("semaphore"))
    #expect(!swiftTesting.contains("XCTest"))
  }

  @Test(
    "the cycle policies and stall responses are named as their environment variables spell them")
  func policyNames() {
    #expect(
      DeadlockDetection.CyclePolicy.allCases.map(\.rawValue) == [
        "abort", "report", "service", "off",
      ])
    #expect(
      DeadlockDetection.StallPolicy.Response.allCases.map(\.rawValue) == ["report", "abort", "off"])
    // Settings reads them as words, which the detector turns into its policies.
    #expect(Settings.cyclePolicies == DeadlockDetection.CyclePolicy.allCases.map(\.rawValue))
    #expect(
      Settings.stallResponses == DeadlockDetection.StallPolicy.Response.allCases.map(\.rawValue))
    #expect(Settings.word("Service", among: Settings.cyclePolicies) == "service")
    #expect(Settings.word("no", among: Settings.stallResponses) == "off")
    #expect(Settings.word("stop", among: Settings.cyclePolicies) == nil)
  }

  @Test("in this process the layout self-test passes and main context is exact")
  func selfTestPassesHere() {
    #expect(MainContext.isExact)
  }
}
