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
    async let waited = onThread { () -> [Int] in
      holder.token.wait()
      return [holder.token.isDone ? 1 : 0, holder.written.load(ordering: .relaxed)]
    }
    #expect(await waiters(1, on: "\"blocking wait\""))
    await #expect(throws: InitializerFailed.self) {
      try await onceOnMain(token: holder.token) { throw InitializerFailed() }
    }
    // Resolved under the lock before the throwing call returned, had it been: still waiting.
    #expect(callersWaiting { $0.contains("\"blocking wait\"") } == 1)
    try await onceOnMain(token: holder.token) { holder.written.store(42, ordering: .relaxed) }
    #expect(await waited == [1, 42])
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

  @Test("a wait on a done token returns at once, in every form")
  func doneTokenReturnsAtOnce() async throws {
    let holder = TokenHolder("done")
    try await onceOnMain(token: holder.token) {}
    let blocked = await onThread { holder.token.wait() }
    #expect(blocked != nil)
    try await holder.token.wait()
    let handled = DispatchSemaphore(value: 0)
    holder.token.wait(completionQueue: .global()) { handled.signal() }
    let signalled = await onThread { handled.wait(timeout: .now() + TimeScale.seconds(10)) }
    #expect(signalled == .success)
  }

  @Test("a lazy value's wait returns the value another read built, and never builds it")
  func lazyWaitNeverBuilds() async throws {
    let holder = LazyHolder()
    async let waited = onThread { holder.lazy.wait() }
    let awaited = Task { () async throws -> Gauge in try await holder.lazy.wait() }
    #expect(await waiters(2, on: "MainLazy<Gauge>"))
    #expect(holder.builds.value.load(ordering: .relaxed) == 0)
    let builtBefore = holder.lazy.isBuilt
    #expect(!builtBefore)
    let built = await holder.lazy.get()
    #expect(built == Gauge(reading: 100))
    #expect(await waited == built)
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
    await #expect(throws: InitializerFailed.self) { try await lazy.value }
    #expect(await waiters(1, on: "AsyncMainLazy<Gauge>"))
    let built = try await lazy.value
    #expect(built == Gauge(reading: 2))
    #expect(try await waiter.value == built)
    #expect(builds.value.load(ordering: .relaxed) == 2)
  }

  @Test("a wait in main context runs the initializers queued meanwhile, which no hop could run")
  func mainContextWaitServesTheMainQueue() async {
    await #expect(processExitsWith: .success) {
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
  }

  @Test("a wait inside the token's own initializer stops with a message naming both calls")
  func waitInsideItsOwnInitializer() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      boundExitTest()
      WaitTokens.waitInsideOwnInitializer()
    }
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(text.contains("MainOnce: re-entrant call for token \"self-waiting\""), "\(text)")
    #expect(
      text.contains(
        "the call at MainOnceTests/WaitTests.swift:\(WaitTokens.selfWaitingLine)"), "\(text)")
  }
}
