import Dispatch
import Foundation
import MainOnceFixtureSupport
import Synchronization
import Testing

@testable import MainOnce

/// A token that lives as long as one test: a short-lived object, not a static.
private final class TokenHolder: Sendable {
  let token: MainOnceToken
  /// What the initializer writes.
  let written = Atomic(0)
  init(_ name: StaticString) { token = MainOnceToken(name) }
}

/// A count that closures share.
private final class Counter: Sendable {
  let value = Atomic(0)
}

/// The value of the lazy values below: its type names them in reports.
private struct Gauge: Sendable, Equatable {
  let reading: Int
}

/// A lazy value that counts its builds, held by an object.
private final class LazyHolder: Sendable {
  let builds = Counter()
  let lazy: MainLazy<Gauge, Never>

  init() {
    let builds = self.builds
    lazy = MainLazy { Gauge(reading: builds.value.add(1, ordering: .relaxed).newValue * 100) }
  }
}

/// Tokens for the exit tests, which reach only statics.
enum WaitTokens {
  static let served = MainOnceToken("served by the waiting main thread")
  static let other = MainOnceToken("another token, served too")
  static let selfWaiting = MainOnceToken("self-waiting")
  static let selfWaitingLine: UInt = #line + 3
  static func waitInsideOwnInitializer() {
    onceOnMain(token: selfWaiting) {
      selfWaiting.wait()
    }
  }
  static let afterThrow = MainOnceToken("served after a throw")
  static let outer = MainOnceToken("awaited by the outer wait")
  static let servedByOuter = MainOnceToken("served by the outer wait")
  static let inner = MainOnceToken("awaited by the nested wait")
  static let lateArrival = MainOnceToken("queued while the nested wait ends")
  static let neverInitialized = MainOnceToken("never initialized")
  static let handlerWaited = MainOnceToken("waited for by a handler")
  static let releasesAHolder = MainOnceToken("whose initializer holds the last reference")
  static let releasesALazyHolder = MainOnceToken("whose initializer holds a lazy value's owner")
  static let releasesAProbe = MainOnceToken("whose initializer holds an object that calls back")
  static let askedInADeinit = MainOnceToken("asked about in a deinit")
  static let selfWaitingLazyLine: UInt = #line + 2
  static let selfWaitingLazy: MainLazy<Int, Never> = MainLazy { () -> Int in
    WaitTokens.selfWaitingLazy.wait() + 1
  }
  static let selfWaitingBuildLine: UInt = #line + 2
  static let selfWaitingBuild: AsyncMainLazy<Int> = AsyncMainLazy { () async throws -> Int in
    try await WaitTokens.selfWaitingBuild.wait() + 1
  }
  static let flakyBuilds = Atomic(0)
  static let flaky = AsyncMainLazy { () throws -> Int in
    if flakyBuilds.add(1, ordering: .relaxed).newValue == 1 { throw InitializerFailed() }
    return 7
  }
}

/// Whether the gate attached to `token`, if any, has its stall timer running.
private func stallTimerRuns(for token: borrowing MainOnceToken) -> Bool {
  let raw = token._word.word.load(ordering: .acquiring)
  return OnceCell.withLock { held in
    Gate.attached(raw, holding: held)?.withStallTracking(holding: held) { stallTracking, _ in
      stallTracking.isTimed
    }
      ?? false
  }
}

/// In an exit test: makes an object whose only reference a completion-form initializer of
/// `token` holds, and ends the process, passing, once that caller is answered, and so the
/// initializer let go, with the object (by the engine, when it answers the caller). The main
/// queue is held until this thread has let go of its own reference.
private func releaseWithAnAnsweredInitializer(
  of token: borrowing MainOnceToken, _ make: () -> any Sendable
) -> Never {
  var object: (any Sendable)? = make()
  let gate = DispatchSemaphore(value: 0)
  DispatchQueue.main.async { gate.wait() }
  let answered = DispatchSemaphore(value: 0)
  onceOnMain(token: token, completionQueue: .global()) { [object] in
    _ = object
  } completion: {
    answered.signal()
  }
  object = nil
  gate.signal()
  exit(answered.wait(timeout: .now() + TimeScale.seconds(5)) == .success ? 0 : 1)
}

/// The reports a process delivered, by kind.
private final class ReportLog: @unchecked Sendable {
  // This is safe because `reports` is only touched under `lock`.
  private let lock = NSLock()
  private var reports: [DeadlockReport] = []

  /// A log of every report from here on, with a stall timeout of 100 ms: for an exit test.
  static func recordingStalls() -> ReportLog {
    let log = ReportLog()
    DeadlockDetection.stalls = .report(after: .milliseconds(100))
    DeadlockDetection.reportHandler = { log.append($0) }
    return log
  }

  func append(_ report: DeadlockReport) {
    lock.lock()
    reports.append(report)
    lock.unlock()
  }

  func of(_ kind: DeadlockReport.Kind) -> [DeadlockReport] {
    lock.lock()
    defer { lock.unlock() }
    return reports.filter { $0.kind == kind }
  }
}

private struct InitializerFailed: Error {}

/// Whether the callers counted by their cell's stall snapshot, for the cell labelled with
/// `name`, are `count`: the waiter has queued.
private func waiters(_ count: Int, on name: String) async -> Bool {
  await eventually { callersWaiting { $0.contains(name) } == count }
}

@Suite("Waiting for a token or a lazy value without initializing it", .testProcessSettings)
struct WaitTests {
  @Test("a blocking wait returns once another caller's initializer ran, not after one that threw")
  func blockingWaitOutlivesAThrow() async throws {
    let holder = TokenHolder("blocking wait")
    // A task, not `async let`: Swift 6.0's compiler crashed on the `async let` (its move-only
    // checker, on the token borrowed in the closure).
    let waited = Task {
      await onThread { () -> [Int] in
        holder.token.wait()
        return [holder.token.isDone ? 1 : 0, holder.written.load(ordering: .relaxed)]
      }
    }
    #expect(await waiters(1, on: "\"blocking wait\""))
    await #expect(throws: InitializerFailed.self) {
      try await onceOnMain(token: holder.token) { throw InitializerFailed() }
    }
    // Resolved under the lock before the throwing call returned, had it been: still waiting.
    #expect(callersWaiting { $0.contains("\"blocking wait\"") } == 1)
    try await onceOnMain(token: holder.token) { holder.written.store(42, ordering: .relaxed) }
    #expect(await waited.value == [1, 42])
  }

  @Test("an await wait returns once the token is done; a cancelled one throws and leaves it fresh")
  func awaitWaitAndCancellation() async throws {
    let holder = TokenHolder("await wait")
    let waiter = Task { () async throws -> Bool in
      try await holder.token.wait()
      return holder.token.isDone
    }
    let cancelled = Task { () async throws in try await holder.token.wait() }
    #expect(await waiters(2, on: "\"await wait\""))
    cancelled.cancel()
    await #expect(throws: CancellationError.self) { try await cancelled.value }
    let doneAfterCancellation = holder.token.isDone
    #expect(!doneAfterCancellation)
    #expect(await waiters(1, on: "\"await wait\""))
    try await onceOnMain(token: holder.token) {}
    #expect(try await waiter.value)
  }

  @Test("a completion-form wait runs its handler once the token is done, not after a throw")
  func completionFormWait() async throws {
    let holder = TokenHolder("completion wait")
    let handled = DispatchSemaphore(value: 0)
    let sawDone = Counter()
    holder.token.wait(completionQueue: .global()) {
      sawDone.value.store(holder.token.isDone ? 1 : 2, ordering: .relaxed)
      handled.signal()
    }
    #expect(await waiters(1, on: "\"completion wait\""))
    await #expect(throws: InitializerFailed.self) {
      try await onceOnMain(token: holder.token) { throw InitializerFailed() }
    }
    #expect(callersWaiting { $0.contains("\"completion wait\"") } == 1)
    try await onceOnMain(token: holder.token) {}
    let signalled = await onThread { handled.wait(timeout: .now() + TimeScale.seconds(10)) }
    #expect(signalled == .success)
    #expect(sawDone.value.load(ordering: .relaxed) == 1)
  }

  @Test("a completion-form wait on a token freed before it is done lets go of its handler")
  func completionFormWaitOnAFreedToken() async {
    final class Captured: Sendable {}
    final class Watch: @unchecked Sendable {
      // This is safe because `captured` is a weak reference, read and cleared atomically by the
      // runtime.
      weak var captured: Captured?
    }
    let watch = Watch()
    let called = Counter()
    var holder: TokenHolder? = TokenHolder("freed while waited for")
    do {
      let captured = Captured()
      watch.captured = captured
      holder!.token.wait(completionQueue: .global()) {
        _ = captured
        called.value.store(1, ordering: .relaxed)
      }
    }
    #expect(await waiters(1, on: "\"freed while waited for\""))
    holder = nil  // nothing can initialize the token now
    #expect(await eventually { watch.captured == nil })
    #expect(called.value.load(ordering: .relaxed) == 0)
  }

  @Test("a completion-form wait after a gate's timer has stopped gets a timer of its own")
  func completionFormWaitAfterTheTimerStopped() async {
    final class Captured: Sendable {}
    final class Watch: @unchecked Sendable {
      // This is safe because `captured` is a weak reference, read and cleared atomically by the
      // runtime.
      weak var captured: Captured?
    }
    let watch = Watch()
    var holder: TokenHolder? = TokenHolder("timed twice")
    // A completion-form caller starts the gate's stall timer; its attempt throws, and the
    // timer stops at its next look, with no caller left.
    let failed = DispatchSemaphore(value: 0)
    onceOnMain(token: holder!.token, completionQueue: .global()) { () throws(InitializerFailed) in
      throw InitializerFailed()
    } completion: { _ in
      failed.signal()
    }
    #expect(await onThread { failed.wait(timeout: .now() + TimeScale.seconds(10)) } == .success)
    let timed = WeakReference(holder)
    #expect(await eventually { timed.object.map { !stallTimerRuns(for: $0.token) } ?? false })
    // A wait now starts a timer again, which lets it go once the token is freed.
    do {
      let captured = Captured()
      watch.captured = captured
      holder!.token.wait(completionQueue: .global()) { _ = captured }
    }
    holder = nil
    #expect(await eventually { watch.captured == nil })
  }

  /// The body of an exit test of `strandedWaitsEndTheirStall`, in the exit test's process.
  private static func strandedWaitsEndTheirStallInItsProcess() async throws {
    boundExitTest()
    let log = ReportLog.recordingStalls()
    var holder: TokenHolder? = TokenHolder("stranded")
    holder!.token.wait(completionQueue: .global()) {}
    guard waitUntil({ !log.of(.stall).isEmpty }) else { exit(2) }
    holder = nil
    exit(waitUntil(timeout: .seconds(3)) { !log.of(.stallEnded).isEmpty } ? 0 : 1)
  }

  @Test(
    "a reported stall of completion-form waits on a freed token ends when they are let go",
    .exitTest)
  func strandedWaitsEndTheirStall() async {
    #if compiler(>=6.2)
      await #expect(processExitsWith: .success) {
        try await Self.strandedWaitsEndTheirStallInItsProcess()
      }
    #else
      await expectProcessExit(.success) {
        try await Self.strandedWaitsEndTheirStallInItsProcess()
      }
    #endif
  }

  /// The body of an exit test of `tokenFreedUnderTheEnginesLock`, in the exit test's process.
  private static func tokenFreedUnderTheEnginesLockInItsProcess() async throws {
    boundExitTest()
    releaseWithAnAnsweredInitializer(of: WaitTokens.releasesAHolder) {
      // A gate is attached to this token: a completion-form wait waits for it.
      let holder = TokenHolder("freed under the lock")
      holder.token.wait(completionQueue: .global()) {}
      return holder
    }
  }

  @Test(
    "a token freed by a closure that the engine releases under its lock frees without it", .exitTest
  )
  func tokenFreedUnderTheEnginesLock() async {
    #if compiler(>=6.2)
      await #expect(processExitsWith: .success) {
        try await Self.tokenFreedUnderTheEnginesLockInItsProcess()
      }
    #else
      await expectProcessExit(.success) {
        try await Self.tokenFreedUnderTheEnginesLockInItsProcess()
      }
    #endif
  }

  @Test("a wait on a done token returns at once, in every form")
  func doneTokenReturnsAtOnce() async throws {
    let holder = TokenHolder("done")
    try await onceOnMain(token: holder.token) {}
    let returned = await onThread { () -> Bool in
      holder.token.wait()
      return true
    }
    #expect(returned == true)
    try await holder.token.wait()
    let handled = DispatchSemaphore(value: 0)
    holder.token.wait(completionQueue: .global()) { handled.signal() }
    let signalled = await onThread { handled.wait(timeout: .now() + TimeScale.seconds(10)) }
    #expect(signalled == .success)
  }

  @Test("a lazy value's wait returns the value another read built, and never builds it")
  func lazyWaitNeverBuilds() async throws {
    let holder = LazyHolder()
    // A task, not `async let`, as in `blockingWaitOutlivesAThrow()`.
    let waited = Task { await onThread { holder.lazy.wait() } }
    let awaited = Task { () async throws -> Gauge in try await holder.lazy.wait() }
    #expect(await waiters(2, on: "MainLazy<Gauge>"))
    #expect(holder.builds.value.load(ordering: .relaxed) == 0)
    let builtBefore = holder.lazy.isBuilt
    #expect(!builtBefore)
    let built = await holder.lazy.get()
    #expect(built == Gauge(reading: 100))
    #expect(await waited.value == built)
    #expect(try await awaited.value == built)
    #expect(holder.builds.value.load(ordering: .relaxed) == 1)
  }

  @Test(
    "an AsyncMainLazy's wait outlives a build that threw, returns the next one's value, and never builds"
  )
  func asyncLazyWaitNeverBuilds() async throws {
    let builds = Counter()
    let lazy = AsyncMainLazy { () throws -> Gauge in
      let build = builds.value.add(1, ordering: .relaxed).newValue
      if build == 1 { throw InitializerFailed() }
      return Gauge(reading: build)
    }
    let waiter = Task { try await lazy.wait() }
    let cancelled = Task { try await lazy.wait() }
    #expect(await waiters(2, on: "AsyncMainLazy<Gauge>"))
    cancelled.cancel()
    await #expect(throws: CancellationError.self) { try await cancelled.value }
    #expect(builds.value.load(ordering: .relaxed) == 0)
    await #expect(throws: InitializerFailed.self) { try await lazy.get() }
    #expect(await waiters(1, on: "AsyncMainLazy<Gauge>"))
    let built = try await lazy.get()
    #expect(built == Gauge(reading: 2))
    #expect(try await waiter.value == built)
    #expect(builds.value.load(ordering: .relaxed) == 2)
  }

  /// The body of an exit test of `mainContextWaitServesTheMainQueue`, in the exit test's process.
  private static func mainContextWaitServesTheMainQueueInItsProcess() async throws {
    boundExitTest()
    Thread {
      // Once the main actor is blocked in its wait, two initializers are queued for the main
      // queue: another token's first, then the awaited one's. Their hops cannot run.
      guard waitUntilParked() else { exit(2) }
      onceOnMain(token: WaitTokens.other) {}
      onceOnMain(token: WaitTokens.served) {}
    }.start()
    await MainActor.run { WaitTokens.served.wait() }
    exit(WaitTokens.served.isDone && WaitTokens.other.isDone ? 0 : 1)
  }

  @Test(
    "a wait in main context runs the initializers queued meanwhile, which no hop could run",
    .exitTest)
  func mainContextWaitServesTheMainQueue() async {
    #if compiler(>=6.2)
      await #expect(processExitsWith: .success) {
        try await Self.mainContextWaitServesTheMainQueueInItsProcess()
      }
    #else
      await expectProcessExit(.success) {
        try await Self.mainContextWaitServesTheMainQueueInItsProcess()
      }
    #endif
  }

  /// The body of an exit test of `servingWaitWokenWithoutAHop`, in the exit test's process.
  private static func servingWaitWokenWithoutAHopInItsProcess() async throws {
    boundExitTest()
    Thread {
      guard waitUntilParked() else { exit(2) }
      // Run by the waiting main thread; its hop stays on its way, unneeded.
      _ = try? onceOnMain(token: WaitTokens.afterThrow) { throw InitializerFailed() }
      // So this attempt sends no hop: only a wake reaches the wait.
      onceOnMain(token: WaitTokens.afterThrow) {}
    }.start()
    await MainActor.run { WaitTokens.afterThrow.wait() }
    exit(WaitTokens.afterThrow.isDone ? 0 : 1)
  }

  @Test(
    "a serving wait is woken by an attempt that sends no hop, after it ran one that threw",
    .exitTest)
  func servingWaitWokenWithoutAHop() async {
    #if compiler(>=6.2)
      await #expect(processExitsWith: .success) {
        try await Self.servingWaitWokenWithoutAHopInItsProcess()
      }
    #else
      await expectProcessExit(.success) {
        try await Self.servingWaitWokenWithoutAHopInItsProcess()
      }
    #endif
  }

  /// The body of an exit test of `nestedServingWaitPassesAWakeOn`, in the exit test's process.
  private static func nestedServingWaitPassesAWakeOnInItsProcess() async throws {
    boundExitTest()
    Thread {
      guard waitUntilParked(1) else { exit(2) }  // main, in the outer wait
      onceOnMain(token: WaitTokens.servedByOuter) {
        // On the main thread, run by the outer wait: it waits again, nested.
        Thread {
          guard waitUntilParked(2) else { exit(2) }  // this thread's caller, and main
          onceOnMain(token: WaitTokens.inner) {
            // Run by the nested wait, which ends when this returns: the attempt queued now
            // wakes the nested wait, too late for it to run it.
            Thread { onceOnMain(token: WaitTokens.lateArrival) {} }.start()
            guard waitUntilParked(3) else { exit(2) }
          }
          WaitTokens.lateArrival.wait()
          onceOnMain(token: WaitTokens.outer) {}
        }.start()
        WaitTokens.inner.wait()
      }
    }.start()
    await MainActor.run { WaitTokens.outer.wait() }
    exit(WaitTokens.lateArrival.isDone ? 0 : 1)
  }

  @Test(
    "a serving wait nested in an attempt of an outer one passes a wake on when it ends", .exitTest)
  func nestedServingWaitPassesAWakeOn() async {
    #if compiler(>=6.2)
      await #expect(processExitsWith: .success) {
        try await Self.nestedServingWaitPassesAWakeOnInItsProcess()
      }
    #else
      await expectProcessExit(.success) {
        try await Self.nestedServingWaitPassesAWakeOnInItsProcess()
      }
    #endif
  }

  /// The body of an exit test of `servingWaitReportsItsStall`, in the exit test's process.
  private static func servingWaitReportsItsStallInItsProcess() async throws {
    boundExitTest()
    DeadlockDetection.stalls = .report(after: .milliseconds(300))
    DeadlockDetection.reportHandler = { report in
      guard report.kind == .stall, report.text.contains("\"never initialized\"") else { return }
      exit(report.text.contains("the wait in main context holds the main queue") ? 0 : 5)
    }
    Thread {
      guard waitUntilParked() else { exit(2) }
      // A fresh token every 10 ms, each run by the waiting main thread: wakes far more
      // often than the grace period and the stall timeout.
      for _ in 0..<500 {
        onceOnMain(token: TokenHolder("served").token) {}
        usleep(10_000)
      }
      exit(3)
    }.start()
    await MainActor.run { WaitTokens.neverInitialized.wait() }
    exit(4)
  }

  @Test(
    "a serving wait that keeps running other initializers still reports its own stall", .exitTest)
  func servingWaitReportsItsStall() async {
    #if compiler(>=6.2)
      await #expect(processExitsWith: .success) {
        try await Self.servingWaitReportsItsStallInItsProcess()
      }
    #else
      await expectProcessExit(.success) {
        try await Self.servingWaitReportsItsStallInItsProcess()
      }
    #endif
  }

  /// The body of an exit test of `completionFormWaitIsNamedInItsStall`, in the exit test's process.
  private static func completionFormWaitIsNamedInItsStallInItsProcess() async throws {
    boundExitTest()
    exitAtTheFirstStallReport()
    WaitTokens.handlerWaited.wait(completionQueue: .global()) {}
    _ = DispatchSemaphore(value: 0).wait(timeout: .now() + TimeScale.seconds(5))
    exit(0)
  }

  @Test("a completion-form wait is named as a wait in its stall report", .exitTest)
  func completionFormWaitIsNamedInItsStall() async {
    #if compiler(>=6.2)
      let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        try await Self.completionFormWaitIsNamedInItsStallInItsProcess()
      }
    #else
      let result = await expectProcessExit(.failure) {
        try await Self.completionFormWaitIsNamedInItsStallInItsProcess()
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(
      text.contains("REPORT MainOnce: a completion handler has waited")
        && text.contains("in MainOnceToken.wait() at MainOnceTests/WaitTests.swift:"), "\(text)")
    #expect(text.contains("no caller has brought the initializer"), "\(text)")
  }

  /// The body of an exit test of `asyncLazyWaitStallOutlivesAThrow`, in the exit test's process.
  private static func asyncLazyWaitStallOutlivesAThrowInItsProcess() async throws {
    boundExitTest()
    let log = ReportLog.recordingStalls()
    let waited = DispatchSemaphore(value: 0)
    Task.detached {
      guard try await WaitTokens.flaky.wait() == 7 else { exit(5) }
      waited.signal()
    }
    guard waitUntil({ !log.of(.stall).isEmpty }) else { exit(2) }
    // A build throws while the wait goes on: its stall has not ended.
    let thrown = DispatchSemaphore(value: 0)
    Task.detached {
      _ = try? await WaitTokens.flaky.get()
      thrown.signal()
    }
    guard thrown.wait(timeout: .now() + TimeScale.seconds(5)) == .success else { exit(3) }
    // Six stall timeouts for a wrong report to come: a second stall, or an end.
    _ = waitUntil(timeout: .milliseconds(600)) {
      log.of(.stall).count > 1 || !log.of(.stallEnded).isEmpty
    }
    guard log.of(.stall).count == 1, log.of(.stallEnded).isEmpty else { exit(6) }
    Task.detached { _ = try? await WaitTokens.flaky.get() }
    guard waited.wait(timeout: .now() + TimeScale.seconds(5)) == .success else { exit(3) }
    // The wait ended: its stall's end is reported once.
    guard waitUntil({ !log.of(.stallEnded).isEmpty }) else { exit(4) }
    exit(log.of(.stall).count == 1 && log.of(.stallEnded).count == 1 ? 0 : 1)
  }

  @Test("an AsyncMainLazy wait's stall goes on across a build that threw, reported once", .exitTest)
  func asyncLazyWaitStallOutlivesAThrow() async {
    #if compiler(>=6.2)
      await #expect(processExitsWith: .success) {
        try await Self.asyncLazyWaitStallOutlivesAThrowInItsProcess()
      }
    #else
      await expectProcessExit(.success) {
        try await Self.asyncLazyWaitStallOutlivesAThrowInItsProcess()
      }
    #endif
  }

  /// The body of an exit test of `unbuiltLazyFreedUnderTheEnginesLock`, in the exit test's process.
  private static func unbuiltLazyFreedUnderTheEnginesLockInItsProcess() async throws {
    boundExitTest()
    releaseWithAnAnsweredInitializer(of: WaitTokens.releasesALazyHolder) { LazyHolder() }
  }

  @Test(
    "an unbuilt MainLazy freed by a closure that the engine releases under its lock frees",
    .exitTest)
  func unbuiltLazyFreedUnderTheEnginesLock() async {
    #if compiler(>=6.2)
      await #expect(processExitsWith: .success) {
        try await Self.unbuiltLazyFreedUnderTheEnginesLockInItsProcess()
      }
    #else
      await expectProcessExit(.success) {
        try await Self.unbuiltLazyFreedUnderTheEnginesLockInItsProcess()
      }
    #endif
  }

  /// The body of an exit test of `initializerCapturesLetGoAfterTheLock`, in the exit test's process.
  private static func initializerCapturesLetGoAfterTheLockInItsProcess() async throws {
    boundExitTest()
    final class CallsBack: Sendable {
      deinit { _ = WaitTokens.askedInADeinit.isDone }  // not done: asks under the lock
    }
    releaseWithAnAnsweredInitializer(of: WaitTokens.releasesAProbe) { CallsBack() }
  }

  @Test(
    "an initializer's captures are let go after the engine's lock: their deinit may call it",
    .exitTest)
  func initializerCapturesLetGoAfterTheLock() async {
    #if compiler(>=6.2)
      await #expect(processExitsWith: .success) {
        try await Self.initializerCapturesLetGoAfterTheLockInItsProcess()
      }
    #else
      await expectProcessExit(.success) {
        try await Self.initializerCapturesLetGoAfterTheLockInItsProcess()
      }
    #endif
  }

  /// The body of an exit test of `lazyWaitInsideItsOwnBuilder`, in the exit test's process.
  private static func lazyWaitInsideItsOwnBuilderInItsProcess() async throws {
    boundExitTest()
    _ = await MainActor.run { WaitTokens.selfWaitingLazy.value }
  }

  @Test("a lazy value's wait inside its own builder stops with a message about waiting", .exitTest)
  func lazyWaitInsideItsOwnBuilder() async {
    #if compiler(>=6.2)
      let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        try await Self.lazyWaitInsideItsOwnBuilderInItsProcess()
      }
    #else
      let result = await expectProcessExit(.failure) {
        try await Self.lazyWaitInsideItsOwnBuilderInItsProcess()
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(text.contains("waited for its own value while building it"), "\(text)")
    #expect(
      text.contains("MainOnceTests/WaitTests.swift:\(WaitTokens.selfWaitingLazyLine)"), "\(text)")
  }

  /// The body of an exit test of `asyncLazyWaitInsideItsOwnBuild`, in the exit test's process.
  private static func asyncLazyWaitInsideItsOwnBuildInItsProcess() async throws {
    boundExitTest()
    _ = try? await WaitTokens.selfWaitingBuild.get()
  }

  @Test(
    "an AsyncMainLazy's wait inside its own build stops with a message about waiting", .exitTest)
  func asyncLazyWaitInsideItsOwnBuild() async {
    #if compiler(>=6.2)
      let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        try await Self.asyncLazyWaitInsideItsOwnBuildInItsProcess()
      }
    #else
      let result = await expectProcessExit(.failure) {
        try await Self.asyncLazyWaitInsideItsOwnBuildInItsProcess()
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(text.contains("waited for its own value while building it"), "\(text)")
    #expect(
      text.contains("MainOnceTests/WaitTests.swift:\(WaitTokens.selfWaitingBuildLine)"),
      "\(text)")
  }

  /// The body of an exit test of `waitInsideItsOwnInitializer`, in the exit test's process.
  private static func waitInsideItsOwnInitializerInItsProcess() async throws {
    boundExitTest()
    WaitTokens.waitInsideOwnInitializer()
  }

  @Test(
    "a wait inside the token's own initializer stops with a message naming both calls", .exitTest)
  func waitInsideItsOwnInitializer() async {
    #if compiler(>=6.2)
      let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        try await Self.waitInsideItsOwnInitializerInItsProcess()
      }
    #else
      let result = await expectProcessExit(.failure) {
        try await Self.waitInsideItsOwnInitializerInItsProcess()
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(text.contains("MainOnce: re-entrant call for token \"self-waiting\""), "\(text)")
    #expect(
      text.contains(
        "the call at MainOnceTests/WaitTests.swift:\(WaitTokens.selfWaitingLine)"), "\(text)")
  }
}
