import Dispatch
import Foundation
import MainOnceFixtureSupport
import Synchronization
import Testing

@testable import MainOnce

private struct BuildFailed: Error, Equatable {}

/// Lets a test decide when a build ends, and how.
private final class BuildScript: Sendable {
  private let results: Locked<[Result<Int, BuildFailed>]>
  private let gate = DispatchSemaphore(value: 0)
  let builds = Recorder<Int>()

  init(_ results: [Result<Int, BuildFailed>]) {
    self.results = Locked(results)
  }

  @MainActor
  func build() async throws -> Int {
    builds.record(builds.count)
    await onThread { self.gate.wait() }
    return try results.withLock { $0.removeFirst() }.get()
  }

  func finishBuild() { gate.signal() }
}

@Suite("AsyncMainLazy", .testProcessSettings)
struct AsyncMainLazyTests {
  @Test("concurrent callers join one build")
  func callersJoinOneBuild() async throws {
    let script = BuildScript([.success(7)])
    let lazy = AsyncMainLazy { try await script.build() }
    let declaration = "AsyncMainLazyTests.swift:\(#line - 1)"
    let callers = (0..<16).map { _ in Task { try await lazy.get() } }
    _ = await eventually { callersWaiting { $0.hasSuffix(declaration) } == 16 }
    script.finishBuild()
    for caller in callers {
      #expect(try await withinTimeLimit { try await caller.value } == 7)
    }
    #expect(script.builds.count == 1)
    #expect(try await withinTimeLimit { try await lazy.get() } == 7)
  }

  @Test("a failed build reaches every waiting caller, and the next access builds again")
  func failureReachesEveryCaller() async throws {
    let script = BuildScript([.failure(BuildFailed()), .success(8)])
    let lazy = AsyncMainLazy { try await script.build() }
    let declaration = "AsyncMainLazyTests.swift:\(#line - 1)"
    let callers = (0..<6).map { _ in Task { try await lazy.get() } }
    // Every caller has joined the build before it fails: none may start the next one.
    _ = await eventually { callersWaiting { $0.hasSuffix(declaration) } == 6 }
    script.finishBuild()
    for caller in callers {
      await #expect(throws: BuildFailed.self) {
        try await withinTimeLimit { try await caller.value }
      }
    }
    let retried = Task { try await lazy.get() }
    _ = await eventually { script.builds.count == 2 }
    script.finishBuild()
    #expect(try await withinTimeLimit { try await retried.value } == 8)
    #expect(script.builds.count == 2)
  }

  @Test("a cancelled caller stops waiting, and the build goes on for the others")
  func cancelledCaller() async throws {
    let script = BuildScript([.success(9)])
    let lazy = AsyncMainLazy { try await script.build() }
    let declaration = "AsyncMainLazyTests.swift:\(#line - 1)"
    let cancelled = Task { try await lazy.get() }
    let patient = Task { try await lazy.get() }
    try await cancelWhileBuilding(cancelled, callers: 2, declaration, script)
    script.finishBuild()
    #expect(try await withinTimeLimit { try await patient.value } == 9)
    #expect(script.builds.count == 1)
  }

  @Test("a build whose callers were all cancelled is kept, published as it ends")
  func buildOutlivesItsCallers() async throws {
    let script = BuildScript([.success(11)])
    let lazy = AsyncMainLazy { try await script.build() }
    let declaration = "AsyncMainLazyTests.swift:\(#line - 1)"
    try await cancelWhileBuilding(Task { try await lazy.get() }, callers: 1, declaration, script)
    script.finishBuild()
    // No caller is left to publish the value: the build does, for the fast path to find.
    let published = await eventually(timeout: .seconds(5)) { lazy._storage.isPublished }
    #expect(published, "not published after the build ended")
    #expect(try await withinTimeLimit { try await lazy.get() } == 11)
    #expect(script.builds.count == 1)
  }

  @Test("a caller that is cancelled before it asks does not start a build")
  func cancelledBeforeAsking() async throws {
    let script = BuildScript([.success(10)])
    let lazy = AsyncMainLazy { try await script.build() }
    let caller = Task {
      withUnsafeCurrentTask { $0?.cancel() }
      return try await lazy.get()
    }
    await #expect(throws: CancellationError.self) {
      try await withinTimeLimit { try await caller.value }
    }
    #expect(script.builds.count == 0)
  }
}

/// Cancels `caller` once the build it joined is under way (`script` runs it, and `callers`
/// callers wait for the lazy value declared at `declaration`); it must stop with
/// `CancellationError` while the build goes on.
private func cancelWhileBuilding(
  _ caller: Task<Int, any Error>, callers: Int, _ declaration: String, _ script: BuildScript,
  sourceLocation: SourceLocation = #_sourceLocation
) async throws {
  _ = await eventually(sourceLocation: sourceLocation) {
    script.builds.count == 1 && callersWaiting { $0.hasSuffix(declaration) } == callers
  }
  caller.cancel()
  await #expect(throws: CancellationError.self, sourceLocation: sourceLocation) {
    try await withinTimeLimit { try await caller.value }
  }
}
