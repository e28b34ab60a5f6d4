import Dispatch
import Foundation
import MainOnceFixtureSupport
import Synchronization
import Testing

@testable import MainOnce

/// Something a builder captures, whose lifetime the tests watch.
private final class Captured: Sendable {
  let number: Int
  init(_ number: Int) { self.number = number }
}

private struct BuildFailed: Error, Equatable {}

/// Whether `object` is still alive, without keeping it alive.
private final class Watch: Sendable {
  private let reference: Locked<Reference>
  private struct Reference: @unchecked Sendable {
    // This is safe because it is only read and written under `Locked`'s lock.
    weak var object: Captured?
  }

  init(_ object: Captured) { reference = Locked(Reference(object: object)) }
  var isAlive: Bool { reference.withLock { $0.object != nil } }
}

/// A build counter that builders share.
private final class Counter: Sendable {
  private let count = Atomic(0)
  func increment() -> Int { count.add(1, ordering: .relaxed).newValue }
  var value: Int { count.load(ordering: .relaxed) }
}

/// An instance that holds a lazy value, as an object's property would. The builder captures an
/// object and throws its first `failures` times.
private final class Holder: Sendable {
  let lazy: MainLazy<Int, BuildFailed>
  let builds = Counter()

  init(capturing captured: Captured, failures: Int = 0) {
    let builds = builds
    lazy = MainLazy { () throws(BuildFailed) -> Int in
      if builds.increment() <= failures { throw BuildFailed() }
      return captured.number
    }
  }
}

/// An instance that holds a lazy value whose builder captures an object and throws its first
/// `failures` times. Its first build lets `joiners` readers on other threads go, and holds
/// until they wait for it: read in main context, it is a build in place that they join.
private final class JoinedHolder: Sendable {
  static let declaration = "MainOnceTests/BuiltStateTests.swift:\(#line + 10)"
  let lazy: MainLazy<Int, BuildFailed>
  let builds = Counter()
  /// Signalled once for each joiner, by the first build.
  let buildStarted = DispatchSemaphore(value: 0)
  /// Whether every joiner waited for the first build before it ended, as that build found.
  let joinedFirstBuild = Recorder<Bool>()

  init(capturing captured: Captured, joiners: Int, failures: Int) {
    let (builds, buildStarted, joinedFirstBuild) = (builds, buildStarted, joinedFirstBuild)
    lazy = MainLazy { () throws(BuildFailed) -> Int in
      let build = builds.increment()
      if build == 1 {
        for _ in 0..<joiners { buildStarted.signal() }
        // Bounded: the test fails on `joinedFirstBuild` if the joiners come late.
        let joined = waitUntil(timeout: .seconds(10)) {
          waitingCallers(labelContaining: JoinedHolder.declaration) >= joiners
        }
        joinedFirstBuild.record(joined)
      }
      if build <= failures { throw BuildFailed() }
      return captured.number
    }
  }
}

/// A read of `holder`'s value, in main context when called on the main actor.
@MainActor
private func read(_ holder: JoinedHolder) -> Result<Int, BuildFailed> {
  Result { () throws(BuildFailed) in try holder.lazy.value }
}

private let staticBuilds = Atomic(0)
private enum Values {
  static let number = MainLazy { staticBuilds.add(1, ordering: .relaxed).newValue }
  static let mainOnly = MainLazy { MainOnlyStack() }
}

@Suite("Built state and builders released", .testProcessSettings)
struct BuiltStateTests {
  @Test("isBuilt and valueIfBuilt of a MainLazy never build, and see the value once built")
  func mainLazyBuiltState() async throws {
    #expect(Values.number.isBuilt == false)
    #expect(Values.number.valueIfBuilt == nil)
    #expect(staticBuilds.load(ordering: .relaxed) == 0, "asking built a value")
    let value = try await withinTimeLimit { await Values.number.get() }
    #expect(value == 1)
    #expect(Values.number.isBuilt == true)
    #expect(Values.number.valueIfBuilt == 1)
    #expect(staticBuilds.load(ordering: .relaxed) == 1)
  }

  @Test("a value that is not Sendable is handed out by valueIfBuilt on the main actor")
  @MainActor
  func mainActorValueIfBuilt() {
    #expect(Values.mainOnly.valueIfBuilt == nil)
    #expect(Values.mainOnly.isBuilt == false)
    Values.mainOnly.value.uses = 5
    #expect(Values.mainOnly.isBuilt == true)
    #expect(Values.mainOnly.valueIfBuilt?.uses == 5)
  }

  @Test("a MainLazy that failed to build is not built, and keeps its builder for the retry")
  func mainLazyFailureKeepsBuilder() async throws {
    var captured: Captured? = Captured(7)
    let watch = Watch(captured!)
    let holder = Holder(capturing: captured!, failures: 1)
    captured = nil
    let first = try await withinTimeLimit { try? await holder.lazy.get() }
    #expect(first == .some(nil), "the first build was to throw")
    #expect(holder.lazy.isBuilt == false)
    #expect(holder.lazy.valueIfBuilt == nil)
    #expect(watch.isAlive, "the builder was released after a build that threw")
    let second = try await withinTimeLimit { try await holder.lazy.get() }
    #expect(second == 7)
    #expect(holder.lazy.isBuilt == true)
    #expect(holder.lazy.valueIfBuilt == 7)
    #expect(!watch.isAlive, "the builder's capture outlived a successful build")
    #expect(holder.builds.value == 2)
  }

  @Test("a MainLazy held by an instance releases what its builder captured once built")
  func mainLazyReleasesBuilder() async throws {
    var captured: Captured? = Captured(3)
    let watch = Watch(captured!)
    let holder = Holder(capturing: captured!)
    captured = nil
    #expect(watch.isAlive)
    // Read from a thread outside main context: a blocking read, built by the main queue.
    let value = await onThread { try? holder.lazy.value }
    #expect(value == .some(3))
    #expect(!watch.isAlive, "the builder's capture outlived a successful build")
  }

  @Test(
    "a read in main context builds in place; readers that join it get its value, or build after it threw; the builder is released once built",
    arguments: [(joiners: 0, failures: 1), (joiners: 3, failures: 0), (joiners: 3, failures: 1)])
  @MainActor
  func mainLazyJoinedInPlace(joiners: Int, failures: Int) async {
    var captured: Captured? = Captured(5)
    let watch = Watch(captured!)
    let holder = JoinedHolder(capturing: captured!, joiners: joiners, failures: failures)
    captured = nil
    let joined = Recorder<Result<Int, BuildFailed>>()
    let finished = DispatchGroup()
    for _ in 0..<joiners {
      finished.enter()
      Thread {
        if holder.buildStarted.wait(timeout: .now() + TimeScale.seconds(10)) == .success {
          joined.record(Result { () throws(BuildFailed) in try holder.lazy.value })
        }
        finished.leave()
      }.start()
    }
    let mine = read(holder)
    #expect(holder.joinedFirstBuild.recorded == [true], "the joiners came after the build")
    if failures == 0 {
      #expect(mine == .success(5))
      #expect(!watch.isAlive, "the builder's capture outlived the build in place")
    } else {
      #expect(mine == .failure(BuildFailed()))
    }
    let allReturned =
      await onThread { finished.wait(timeout: .now() + TimeScale.seconds(20)) == .success }
    #expect(allReturned == true)
    #expect(joined.recorded == Array(repeating: .success(5), count: joiners))
    if joiners == 0 {
      #expect(watch.isAlive, "the builder was released after a build that threw")
      #expect(read(holder) == .success(5))
    }
    #expect(holder.builds.value == failures + 1, "a build ran again after one succeeded")
    let isBuilt = holder.lazy.isBuilt
    #expect(isBuilt)
    #expect(!watch.isAlive, "the builder's capture outlived a successful build")
  }

  @Test("isBuilt and valueIfBuilt of an AsyncMainLazy never build, and see the value once built")
  func asyncBuiltState() async throws {
    let builds = Counter()
    let lazy = AsyncMainLazy { builds.increment() }
    #expect(lazy.isBuilt == false)
    #expect(lazy.valueIfBuilt == nil)
    #expect(builds.value == 0, "asking built a value")
    #expect(try await withinTimeLimit { try await lazy.get() } == 1)
    #expect(lazy.isBuilt == true)
    #expect(lazy.valueIfBuilt == 1)
    #expect(builds.value == 1)
  }

  @Test("an AsyncMainLazy releases what its builder captured once built, and not after a failure")
  func asyncReleasesBuilder() async throws {
    var captured: Captured? = Captured(9)
    let watch = Watch(captured!)
    let attempts = Counter()
    let lazy = AsyncMainLazy { [captured = captured!] in
      if attempts.increment() == 1 { throw BuildFailed() }
      return captured.number
    }
    captured = nil
    let first = try await withinTimeLimit { try? await lazy.get() }
    #expect(first == .some(nil), "the first build was to throw")
    #expect(lazy.isBuilt == false)
    #expect(lazy.valueIfBuilt == nil)
    #expect(watch.isAlive, "the builder was released after a build that threw")
    #expect(try await withinTimeLimit { try await lazy.get() } == 9)
    #expect(lazy.isBuilt == true)
    #expect(lazy.valueIfBuilt == 9)
    #expect(!watch.isAlive, "the builder's capture outlived a successful build")
  }
}
