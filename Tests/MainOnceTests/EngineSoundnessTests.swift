import Dispatch
import Foundation
import MainOnceFixtureSupport
import Synchronization
import Testing

@testable import MainOnce

#if canImport(Glibc)
  import Glibc
#endif

/// Adversarial reproductions of engine bugs, one fixture process per scenario (the main queue is
/// process-wide; several scenarios leave it, or the process's heap, in a state no other test may
/// share). See `Tests/MainOnceFixture/EngineScenarios.swift` for what each scenario does.
///
/// Serialized: several scenarios are heavy (thousands of async callers or completion calls, or a
/// stress that keeps every core busy for seconds); side by side on two cores they would only
/// slow each other down. None depends on timing: a scenario that needs a worker in its hop waits
/// until it is parked there, and every bound is scaled (``TimeScale``).
@Suite(
  "Initializers run once and callers return only after them, under races, throws and cancellations",
  .serialized)
struct EngineSoundnessTests {
  struct Case: CustomTestStringConvertible, Sendable {
    let scenario: String
    let driver: Driver
    var testDescription: String { "\(scenario), \(driver.rawValue)" }
  }

  static func cases(_ scenarios: String...) -> [Case] {
    scenarios.flatMap { scenario in
      [Driver.dispatchMain, .runLoop].map { Case(scenario: scenario, driver: $0) }
    }
  }

  /// Under `--sanitize=address`, freed memory must be reusable (no quarantine), or the
  /// scenarios that need an address reused cannot run, and a leak report at exit must not turn
  /// a passing scenario into a failing one. Ignored without AddressSanitizer.
  static let sanitizerEnvironment: [String: String] = {
    let ours = "quarantine_size_mb=0:thread_local_quarantine_size_kb=0:detect_leaks=0"
    let existing = ProcessInfo.processInfo.environment["ASAN_OPTIONS"].map { $0 + ":" } ?? ""
    return ["ASAN_OPTIONS": existing + ours]
  }()

  /// Runs `MainOnceFixture engine <scenario> <driver>` and checks that it passed.
  private func expectPass(
    _ testCase: Case, environment: [String: String] = [:],
    sourceLocation: SourceLocation = #_sourceLocation
  ) async throws {
    let outcome = try await FixtureProcess.run(
      "MainOnceFixture", ["engine", testCase.scenario, testCase.driver.rawValue],
      environment: Self.sanitizerEnvironment.merging(environment) { $1 })
    #expect(!outcome.timedOut, "the scenario hung", sourceLocation: sourceLocation)
    #expect(
      outcome.status == 0,
      "status \(outcome.status): \(outcome.verdict)\n\(outcome.standardOutput)\n\(outcome.standardError)",
      sourceLocation: sourceLocation)
    #expect(outcome.verdict.hasPrefix("PASS"), sourceLocation: sourceLocation)
  }

  // MARK: Early return at a reused address

  @Test(
    "a hop left over by an in-place run does not answer a new token at the same address",
    arguments: cases("staleHopEarlyReturn", "staleHopEarlyReturnPerObject"))
  func staleHopDoesNotAnswerNewToken(_ testCase: Case) async throws {
    try await expectPass(testCase)
  }

  @Test(
    "a left-over hop served by a nested run loop does not strand the callers of a new token",
    arguments: cases("staleHopNegativeCount"))
  func staleHopDoesNotStrandCallers(_ testCase: Case) async throws {
    try await expectPass(testCase)
  }

  @Test(
    "a hop served by a run loop nested in its own gate's in-place initializer leaves the gate able to hop again",
    arguments: cases("nestedRunLoopServesPendingHop"))
  func nestedRunLoopServesPendingHop(_ testCase: Case) async throws {
    try await expectPass(testCase)
  }

  // MARK: Writes after the owner is gone

  @Test(
    "a completion handler may release the token's owner; MainOnce does not write to it after",
    arguments: cases("ownerReleasedByCompletion"))
  func ownerReleasedByCompletionHandler(_ testCase: Case) async throws {
    try await expectPass(testCase)
  }

  @Test(
    "owners released while their completion calls are in flight: each success is their own",
    arguments: cases("ownersReleasedInFlight"))
  func ownersReleasedWhileInFlight(_ testCase: Case) async throws {
    try await expectPass(testCase)
  }

  // MARK: Callers left blocked

  @Test(
    "a worker in its hop returns once main-queue code has run the token in place",
    arguments: cases("inPlaceWhileWorkerHops", "inPlaceWhileWorkerHopsTracked"))
  func workerInHopReturns(_ testCase: Case) async throws {
    try await expectPass(testCase)
  }

  @Test(
    "a blocking call nested in main-queue code's own queued call runs each initializer once",
    arguments: cases("nestedBlockingCallInMainContext"))
  func nestedBlockingCallInMainContext(_ testCase: Case) async throws {
    try await expectPass(testCase)
  }

  @Test(
    "concurrentPerform on the main queue with one token does not hang",
    arguments: cases("concurrentPerform"))
  func concurrentPerformOnMain(_ testCase: Case) async throws {
    try await expectPass(testCase)
  }

  // MARK: Fallback mode

  @Test(
    "without queue introspection, onceOnMain inside a runOnce body still runs in main context",
    arguments: cases("fallbackRunOnceNesting", "fallbackRunOnceNestingAlone"))
  func fallbackNestedInRunOnce(_ testCase: Case) async throws {
    try await expectPass(testCase, environment: ["MAINONCE_QUEUE_INTROSPECTION": "off"])
  }

  // MARK: Lost cancellations

  @Test("async callers cancelled at random moments around their await all end promptly")
  func cancellationStorm() async throws {
    try await expectPass(Case(scenario: "asyncCancellationStorm", driver: .dispatchMain))
  }

  // MARK: The randomized stress

  @Test(
    "randomized stress: mixed callers, throws, cancellations, in-place runs, reused addresses",
    arguments: [Driver.dispatchMain, .runLoop, .asyncMain])
  func engineStress(_ driver: Driver) async throws {
    let (executable, arguments) =
      driver == .asyncMain
      ? ("MainOnceAsyncFixture", ["engineStress"])
      : ("MainOnceFixture", ["engine", "stress", driver.rawValue])
    let outcome = try await FixtureProcess.run(
      executable, arguments, environment: Self.sanitizerEnvironment,
      timeout: .seconds(EngineStress.watchdogSeconds + 30))
    #expect(!outcome.timedOut, "the stress hung: \(outcome.standardError)")
    #expect(outcome.status == 0, "\(outcome.verdict)\n\(outcome.standardError)")
    #expect(outcome.verdict.hasPrefix("PASS"), "\(outcome.verdict)")
    #expect(Int(outcome.value("reusedAddresses") ?? "") ?? 0 > 0, "no address was reused")
    for key in [
      "doubleSuccesses", "missedSuccesses", "runsAfterSuccess", "overlaps", "outsideMainContext",
      "earlyReturns", "foreignErrors", "unanswered",
    ] {
      #expect(outcome.value(key) == "0", "\(key): \(outcome.verdict)")
    }
  }
}

// MARK: - In-process reproductions

/// An `AsyncMainLazy` whose builder awaits its own value.
private enum SelfAwaitingLazy {
  static let value: AsyncMainLazy<Int> = AsyncMainLazy { try await SelfAwaitingLazy.read() + 1 }

  static func read() async throws -> Int { try await value.get() }
}

/// An `AsyncMainLazy` whose builder waits for a task it started, which awaits the value.
private enum TaskAwaitingLazy {
  /// The line of the inner task's await.
  static let inner = #line + 2
  static let value: AsyncMainLazy<Int> = AsyncMainLazy {
    try await Task { try await TaskAwaitingLazy.value.get() }.value + 1
  }
}

/// An object that calls `runOnce(for: self)` from a method that its `deinit` calls too.
private final class SelfScoped: Sendable {
  static let runs = Atomic(0)
  /// The line of the `runOnce(for:)` call below.
  static let callLine: UInt = #line + 3

  func setUp() {
    runOnce(for: self) { SelfScoped.runs.add(1, ordering: .relaxed) }
  }

  deinit { setUp() }
}

/// Lets a builder suspend until a thread releases it, without blocking the main actor.
private final class BuildGate: @unchecked Sendable {
  // This is safe because `continuation` and `isOpen` are only touched under `lock`.
  private let lock = NSLock()
  private var continuation: CheckedContinuation<Void, Never>?
  private var isOpen = false
  let returned = Atomic(false)

  func wait() async {
    await withCheckedContinuation { continuation in
      lock.lock()
      if isOpen {
        lock.unlock()
        continuation.resume()
      } else {
        self.continuation = continuation
        lock.unlock()
      }
    }
  }

  func open() {
    lock.lock()
    isOpen = true
    let waiting = continuation.take()
    lock.unlock()
    waiting?.resume()
  }
}

@Suite("Self-waits stop, and freed tokens and answered callers leave nothing behind")
struct EngineSoundnessInProcessTests {
  // MARK: Awaiting its own value while building

  /// The body of an exit test of `asyncLazyAwaitingItself`, in the exit test's process.
  private static func asyncLazyAwaitingItselfInItsProcess() async throws {
    boundExitTest(seconds: 5)
    _ = try? await SelfAwaitingLazy.value.get()
  }

  @Test("an AsyncMainLazy builder that awaits its own value stops with a message", .exitTest)
  func asyncLazyAwaitingItself() async {
    #if compiler(>=6.2)
      let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        try await Self.asyncLazyAwaitingItselfInItsProcess()
      }
    #else
      let result = await expectProcessExit(.failure) {
        try await Self.asyncLazyAwaitingItselfInItsProcess()
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(text.contains("MainOnce:"), "\(text)")
    #expect(text.contains("AsyncMainLazy"), "\(text)")
    // MainOnce's own diagnosis, not the watchdog's stall report followed by the time limit
    // (both of which also mention "MainOnce:" and "AsyncMainLazy").
    #expect(text.contains("awaited its own value while building it"), "\(text)")
    #expect(!text.contains("exit test timed out"), "\(text)")
  }

  /// The body of an exit test of `asyncLazyWaitingForTaskInsideBuild`, in the exit test's process.
  private static func asyncLazyWaitingForTaskInsideBuildInItsProcess() async throws {
    boundExitTest(seconds: 10)
    exitAtTheFirstStallReport()
    _ = try? await TaskAwaitingLazy.value.get()
  }

  /// A task started with `Task { }` inside the build is not part of it: it may outlive the
  /// build, so awaiting the value from it is no re-entrance. When the builder waits for such a
  /// task, nothing can end the wait; the stall report says why.
  @Test(
    "a builder waiting for a Task { } that awaits its value is reported as a stall naming the task",
    .exitTest)
  func asyncLazyWaitingForTaskInsideBuild() async {
    #if compiler(>=6.2)
      let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        try await Self.asyncLazyWaitingForTaskInsideBuildInItsProcess()
      }
    #else
      let result = await expectProcessExit(.failure) {
        try await Self.asyncLazyWaitingForTaskInsideBuildInItsProcess()
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(text.contains("REPORT MainOnce: 2 callers have waited"), "\(text)")
    #expect(
      text.contains(
        "the task awaiting at MainOnceTests/EngineSoundnessTests.swift:\(TaskAwaitingLazy.inner)"
          + " was started inside the build with Task { }"), "\(text)")
    #expect(!text.contains("awaited its own value while building it"), "\(text)")
  }

  // MARK: runOnce reached from deinit

  /// The body of an exit test of `runOnceFromDeinit`, in the exit test's process.
  private static func runOnceFromDeinitInItsProcess() async throws {
    boundExitTest(seconds: 5)
    do {
      let object = SelfScoped()
      object.setUp()
      object.setUp()
    }  // deinit calls setUp() again
    let runs = SelfScoped.runs.load(ordering: .relaxed)
    FileHandle.standardError.write(Data("RESULT runs=\(runs)\n".utf8))
    exit(EXIT_FAILURE)
  }

  /// Either the call site runs once per lifetime, also when `deinit` reaches it, or MainOnce
  /// stops the process with a message naming the call site. The child exits with a failure in
  /// both cases, so that one exit condition covers them; `RESULT runs=` tells them apart.
  @Test(
    "runOnce(for: self) reached from deinit does not run the call site a second time", .exitTest)
  func runOnceFromDeinit() async {
    #if compiler(>=6.2)
      let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        try await Self.runOnceFromDeinitInItsProcess()
      }
    #else
      let result = await expectProcessExit(.failure) {
        try await Self.runOnceFromDeinitInItsProcess()
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    let ranOnce = text.contains("RESULT runs=1\n")
    let stoppedAtCallSite =
      !text.contains("RESULT runs=") && text.contains("MainOnce:")
      && text.contains("MainOnceTests/EngineSoundnessTests.swift:\(SelfScoped.callLine)")
    #expect(ranOnce || stoppedAtCallSite, "\(text)")
  }

  // MARK: AsyncMainLazy bookkeeping

  /// Callers are cancelled right as the build finishes, so that many cancellation handlers run
  /// after their caller was already resumed with the value. Once every caller has returned, the
  /// lazy value must keep no per-caller bookkeeping.
  @Test("AsyncMainLazy keeps no bookkeeping for callers cancelled after they were answered")
  func asyncLazyForgetsLateCancellations() async throws {
    let gate = BuildGate()
    let declaration = "declared at MainOnceTests/EngineSoundnessTests.swift:\(#line + 1)"
    let lazy = AsyncMainLazy<Int> {
      await gate.wait()
      gate.returned.store(true, ordering: .releasing)
      return 5
    }
    let callers = (0..<2_000).map { _ in Task.detached { try await lazy.get() } }
    // Every caller joins the build before it returns.
    _ = await eventually { callersWaiting { $0.hasSuffix(declaration) } == callers.count }
    // As the build returns, cancel every caller: most are resumed already, or about to be.
    let cancelled = await onThread { () -> Bool in
      gate.open()
      let deadline = DispatchTime.now() + TimeScale.seconds(5)
      while !gate.returned.load(ordering: .acquiring) {
        if DispatchTime.now() > deadline { return false }
      }
      for caller in callers { caller.cancel() }
      return true
    }
    #expect(cancelled == true, "the build did not return in time")
    var values = 0
    var cancellations = 0
    for caller in callers {
      switch await Result(catching: { try await withinTimeLimit { try await caller.value } }) {
      case .success(let value?):
        #expect(value == 5)
        values += 1
      case .success(nil): break  // withinTimeLimit recorded an issue
      case .failure(is CancellationError): cancellations += 1
      case .failure(let error): Issue.record("unexpected error \(error)")
      }
    }
    #expect(values + cancellations == callers.count)
    // Nothing is kept for the callers: the build has ended, and published its value, even if
    // every caller was cancelled first; nobody waits for it.
    #expect(!lazy.isBuilding)
    let waited = Instrumentation.waitedFor.contains {
      $0.label.description.hasSuffix(declaration) && $0.stallSnapshot() != nil
    }
    #expect(!waited, "callers still wait for the build")
    let isPublished = lazy._storage.isPublished
    #expect(
      isPublished,
      "the value is not published (\(values) callers got it, \(cancellations) were cancelled)")
  }
}

// MARK: - Storage and fallback details

private struct NotYet: Error {}

/// A short-lived owner of a token.
private final class LeakCheckOwner: Sendable {
  let token = MainOnceToken("leak check")
}

extension EngineSoundnessInProcessTests {
  /// A failed initialization leaves the token's gate attached to its storage (nothing was
  /// published, so nobody detached it). When the token's owner goes, the storage must give its
  /// reference back: nothing else holds the gate.
  @Test("a token freed with its gate still attached releases the gate")
  @MainActor
  func freedTokenReleasesItsFlight() async throws {
    weak var gate: Gate?
    do {
      let owner = LeakCheckOwner()
      // From a worker, through a hop: a gate is attached, and stays after the throw. (In
      // main context, with nobody else calling, an attempt runs without a gate.)
      let threw = await onThread {
        do throws(NotYet) {
          try onceOnMain(token: owner.token) { () throws(NotYet) in throw NotYet() }
          return false
        } catch {
          return true
        }
      }
      #expect(threw == true)
      gate = OnceCell.withLock {
        Gate.attached(owner.token._word.word.load(ordering: .relaxed), holding: $0)
      }
      #expect(gate != nil)
    }  // the owner, its token and the token's storage end here
    // Allow for a reference still held by code on its way out (none is expected).
    let deadline = ContinuousClock.now + .seconds(1).scaled
    while gate != nil && ContinuousClock.now < deadline {
      try await Task.sleep(for: .milliseconds(10))
    }
    #expect(gate == nil, "the gate outlived the storage that held it")
  }
}

/// Writes a line to standard error at once (an exit test's output must survive `exit`).
private func note(_ line: String) {
  FileHandle.standardError.write(Data((line + "\n").utf8))
}

private enum FallbackDepthTokens {
  static let outer = MainOnceToken("fallback depth, outer")
  static let inner = MainOnceToken("fallback depth, inner")
}

extension EngineSoundnessInProcessTests {
  /// The body of an exit test of `nestedSyncInsideInitializer`, in the exit test's process.
  private static func nestedSyncInsideInitializerInItsProcess() async throws {
    setenv("MAINONCE_QUEUE_INTROSPECTION", "off", 1)  // before MainOnce reads it
    boundExitTest(seconds: 8)
    guard !MainContext.isExact else {
      note("SKIP introspection is on")
      exit(0)
    }
    let done = DispatchSemaphore(value: 0)
    Thread {
      onceOnMain(token: FallbackDepthTokens.outer) {
        let onMainThread = Thread.isMainThread
        DispatchQueue(label: "fallback depth").sync {
          note("INNER mainThread=\(onMainThread) isCurrent=\(MainContext.isCurrent)")
          onceOnMain(token: FallbackDepthTokens.inner) {}
        }
      }
      done.signal()
    }.start()
    guard done.wait(timeout: .now() + TimeScale.seconds(4)) == .success else {
      note("HUNG")
      exit(4)
    }
    note("DONE")
  }

  /// Without queue introspection, code inside `queue.sync` within an initializer that a hop runs
  /// on a worker thread (after `dispatchMain()`) shows no public sign of main context: no main
  /// thread, no main-queue specific. Only MainOnce's own count of the initializers it runs says
  /// so; without it, the nested call would hop to a main queue its own thread holds, and hang.
  @Test(
    "without introspection, onceOnMain in a sync inside an initializer runs in place", .exitTest)
  func nestedSyncInsideInitializer() async {
    #if compiler(>=6.2)
      let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
        try await Self.nestedSyncInsideInitializerInItsProcess()
      }
    #else
      let result = await expectProcessExit(.success) {
        try await Self.nestedSyncInsideInitializerInItsProcess()
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(text.contains("DONE"), "\(text)")
    // The scenario proves something only if the initializer ran off the main thread.
    #expect(text.contains("INNER mainThread=false"), "\(text)")
  }
}
