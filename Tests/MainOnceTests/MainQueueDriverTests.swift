import Dispatch
import Foundation
import MainOnce
import MainOnceFixtureSupport
import Testing

/// Whether GLib can be loaded here, for the tests that run a real GLib main loop.
private let glibLoads = dlopen("libglib-2.0.so.0", RTLD_NOW | RTLD_LOCAL) != nil

/// Event loops of a program's own, serving the main queue with `MainQueueDriver`, one fixture
/// process each: the main thread runs the loop.
@Suite("Serving the main queue from any event loop")
struct MainQueueDriverTests {
  @Test(
    "a poll loop on the main thread serves onceOnMain, MainLazy, main-actor tasks and main-queue blocks"
  )
  func pollLoop() async throws {
    try await expectServed(by: "poll")
  }

  @Test(
    "a GLib main loop, with the descriptor added by g_unix_fd_add, serves the main queue too",
    .enabled(if: glibLoads, "libglib-2.0.so.0 cannot be loaded on this machine"))
  func glibLoop() async throws {
    try await expectServed(by: "glib")
  }

  private func expectServed(by loop: String) async throws {
    let outcome = try await FixtureProcess.scenario("foreignLoop", loop)
    #expect(!outcome.timedOut, "the loop hung: \(outcome.standardError)")
    #expect(outcome.status == 0, "\(outcome.verdict)\n\(outcome.standardError)")
    #expect(outcome.verdict.hasPrefix("PASS"), "\(outcome.verdict)")
    #expect(outcome.value("runs") == "1")
    #expect(outcome.value("earlyReturns") == "0")
    #expect(outcome.value("mainThread") == "true")
    // One hop for the token the threads race on, one for the MainLazy.
    #expect(outcome.value("workItems") == "2")
    #expect(outcome.standardError.isEmpty, "\(outcome.standardError)")
  }

  @Test("a loop that stops draining is reported as one served by MainQueueDriver")
  func stopsDraining() async throws {
    let outcome = try await FixtureProcess.scenario("foreignLoop", "stopsDraining")
    #expect(outcome.verdict == "PASS the worker's call returned", "\(outcome.standardError)")
    #expect(
      outcome.standardError.contains(
        "(the main thread, served by MainQueueDriver), which is idle in poll, waiting for events: its loop has not drained the main queue's work for"
      ), "\(outcome.standardError)")
    #expect(outcome.standardError.contains("hint: drain whenever MainQueueDriver.fileDescriptor"))
  }

  @Test("the descriptor stays valid for the life of the process, also after dispatchMain()")
  func descriptorLifetime() async throws {
    let outcome = try await FixtureProcess.scenario("foreignLoop", "descriptorLifetime")
    #expect(outcome.verdict.hasPrefix("PASS"), "\(outcome.verdict)")
  }

  @Test(
    "RunLoop.main's timers fire when due and its perform blocks run, under a loop that waits the driver's timeout",
    arguments: ["poll"] + (glibLoads ? ["glib"] : []))
  func runLoopTimersFire(loop: String) async throws {
    let outcome = try await FixtureProcess.scenario("runLoopTimers", loop)
    #expect(!outcome.timedOut, "the loop hung: \(outcome.standardError)")
    #expect(outcome.verdict.hasPrefix("PASS"), "\(outcome.verdict)\n\(outcome.standardError)")
    #expect(outcome.value("perform") == "ran", "\(outcome.verdict)")
    // A drain in a timer's callback ran no pass inside it; the next drain ran its block.
    #expect(outcome.value("nestedPass") == "none", "\(outcome.verdict)")
    #expect(outcome.value("performFromTimer") == "ran", "\(outcome.verdict)")
    // A 100 ms timer, scheduled on the main thread before the loop ran and from a main-queue
    // block while it ran, fires not before it is due; the loop never waits past its due time,
    // and the first drain after it fires it. How late it fires then depends only on how soon
    // the machine runs the woken loop: a figure for a benchmark, not a bound for a test.
    for timer in ["timer", "fromMainQueue"] {
      let fired = try #require(outcome.value(timer).flatMap(Double.init), "\(outcome.verdict)")
      #expect(fired >= 100, "\(timer) fired early, after \(fired) ms")
      #expect(outcome.value(timer + "LateWaits") == "0", "\(outcome.verdict)")
      #expect(outcome.value(timer + "MissedDrains") == "0", "\(outcome.verdict)")
    }
    #expect(outcome.standardError.isEmpty, "\(outcome.standardError)")
  }

  @Test(
    "a loop served by the driver, idle with a timer due in a minute, wakes its main thread at most once in 3 s",
    arguments: ["pollIdle"] + (glibLoads ? ["glibIdle"] : []))
  func idleLoopStaysAsleep(scenario: String) async throws {
    let outcome = try await FixtureProcess.scenario("runLoopTimers", scenario)
    #expect(outcome.verdict.hasPrefix("PASS"), "\(outcome.verdict)\n\(outcome.standardError)")
    let wakeUps = try #require(outcome.value("wakeUps").flatMap(Int.init), "\(outcome.verdict)")
    #expect(wakeUps <= 1, "the main thread woke \(wakeUps) times")
  }

  @Test("drain() runs the pending work and resets the descriptor, so that a loop does not spin")
  func drainResetsTheDescriptor() async throws {
    let outcome = try await FixtureProcess.scenario("foreignLoop", "drainResets")
    #expect(
      outcome.verdict == "PASS readableWithWork=true ran=true readableAfterDrain=false",
      "\(outcome.standardError)")
  }

  /// The body of an exit test of `drainOffTheMainThread`, in the exit test's process.
  private static func drainOffTheMainThreadInItsProcess() async throws {
    boundExitTest()
    // Swift Testing's runner has called dispatchMain(): this runs on a worker thread.
    MainQueueDriver.drain()
  }

  @Test(
    "drain() off the main thread stops with a message that names the call site and the rule",
    .exitTest)
  func drainOffTheMainThread() async {
    #if compiler(>=6.2)
      let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        try await Self.drainOffTheMainThreadInItsProcess()
      }
    #else
      let result = await expectProcessExit(.failure) {
        try await Self.drainOffTheMainThreadInItsProcess()
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(
      text.contains(
        #/MainOnceTests/MainQueueDriverTests\.swift:\d+: Fatal error: MainOnce: MainQueueDriver\.drain\(\) at MainOnceTests/MainQueueDriverTests\.swift:\d+ was called on thread \d+, which is not the main thread/#
      ), "\(text)")
    #expect(text.contains("legal only there, and only while the main queue is bound to it"))
  }

  /// The body of an exit test of `requireMainThreadOnAWorker`, in the exit test's process.
  private static func requireMainThreadOnAWorkerInItsProcess() async throws {
    boundExitTest()
    // After the runner's dispatchMain(), main-actor code runs on worker threads.
    await MainActor.run { MainContext.requireMainThread(for: "GTK") }
  }

  @Test(
    "requireMainThread in main-queue code on a worker thread names the driver and the fix",
    .exitTest)
  func requireMainThreadOnAWorker() async {
    #if compiler(>=6.2)
      let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        try await Self.requireMainThreadOnAWorkerInItsProcess()
      }
    #else
      let result = await expectProcessExit(.failure) {
        try await Self.requireMainThreadOnAWorkerInItsProcess()
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(
      text.contains(
        #/MainOnce: GTK needs the main thread, but the main-queue code at MainOnceTests/MainQueueDriverTests\.swift:\d+ runs on thread \d+, a worker thread/#
      ), "\(text)")
    #expect(text.contains("after dispatchMain()"))
    #expect(
      text.contains(
        "call RunLoop.main.run(), or drain it from your event loop with MainQueueDriver"))
  }

  /// The body of an exit test of `requireMainThreadOutsideMainContext`, in the exit test's process.
  private static func requireMainThreadOutsideMainContextInItsProcess() async throws {
    boundExitTest()
    let thread = Thread { MainContext.requireMainThread(for: "SDL video") }
    thread.start()
    usleep(TimeScale.microseconds(5_000_000))
  }

  @Test("requireMainThread outside main context stops with a message", .exitTest)
  func requireMainThreadOutsideMainContext() async {
    #if compiler(>=6.2)
      let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        try await Self.requireMainThreadOutsideMainContextInItsProcess()
      }
    #else
      let result = await expectProcessExit(.failure) {
        try await Self.requireMainThreadOutsideMainContextInItsProcess()
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(text.contains("MainOnce: SDL video needs the main thread, and the code at"), "\(text)")
    #expect(text.contains("outside main context"))
  }
}
