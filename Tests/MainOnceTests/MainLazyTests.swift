import Dispatch
import Foundation
import MainOnceFixtureSupport
import Synchronization
import Testing

@testable import MainOnce

struct LazyBuildFailed: Error, Equatable {
  let attempt: Int
}

final class Stack: Sendable {
  let builtInMainContext: Bool
  let serial: Int

  init(serial: Int) {
    builtInMainContext = DispatchQueue.getSpecific(key: mainQueueKey) == true
    self.serial = serial
  }
}

/// A value that must stay on the main actor.
final class MainOnlyStack {
  var uses = 0
}

private let builds = Atomic(0)
private let failingThriceAttempts = Atomic(0)

@Suite("MainLazy", .testProcessSettings)
struct MainLazyTests {
  enum Values {
    static let stack = MainLazy { Stack(serial: builds.add(1, ordering: .relaxed).newValue) }
    static let mainOnly = MainLazy { MainOnlyStack() }
    static let failingThrice = MainLazy { () throws(LazyBuildFailed) -> Int in
      let attempt = failingThriceAttempts.add(1, ordering: .relaxed).newValue
      // Hold each build until the readers that have built nothing are queued behind it, so that
      // failures meet waiting readers. Bounded and unchecked: a reader that comes late only
      // makes the race smaller, and nothing the test checks depends on it.
      _ = waitUntil(timeout: .milliseconds(200)) {
        waitingCallers(labelContaining: "MainLazy<Int> declared at MainOnceTests/MainLazyTests")
          >= 8 - attempt
      }
      if attempt <= 3 { throw LazyBuildFailed(attempt: attempt) }
      return attempt
    }
  }

  @Test("the builder runs once, in main context, while eight threads race")
  func racingReaders() async {
    let serials = Locked<Set<Int>>([])
    let inMainContext = Atomic(true)
    await raceThreads(8) { _ in
      let stack = Values.stack.value
      serials.withLock { _ = $0.insert(stack.serial) }
      if !stack.builtInMainContext { inMainContext.store(false, ordering: .relaxed) }
    }
    #expect(serials.withLock { $0 } == [1])
    #expect(builds.load(ordering: .relaxed) == 1)
    let builtInMainContext = inMainContext.load(ordering: .relaxed)
    #expect(builtInMainContext)
  }

  @Test("a builder that throws hands its error to its own reader, and the next read builds again")
  func throwingBuilder() async throws {
    let outcomes = Recorder<Result<Int, LazyBuildFailed>>()
    await raceThreads(8) { _ in
      outcomes.record(Result { () throws(LazyBuildFailed) in try Values.failingThrice.value })
    }
    let results = outcomes.recorded
    // Each failed build's error went to one reader; everyone else got the one value built.
    #expect(results.count == 8)
    #expect(results.compactMap { try? $0.get() } == Array(repeating: 4, count: 5))
    let errors = results.compactMap { result -> Int? in
      if case .failure(let error) = result { error.attempt } else { nil }
    }
    #expect(errors.sorted() == [1, 2, 3])
    #expect(failingThriceAttempts.load(ordering: .relaxed) == 4)
    let value = try await Values.failingThrice.get()
    #expect(value == 4)
  }

  @Test("get() suspends, never blocks: 64 tasks all start waiting while the value is built")
  func asyncReadersSuspend() async {
    await withTaskGroup(of: Stack.self) { group in
      for _ in 0..<AsyncReads.readers {
        group.addTask {
          AsyncReads.started.add(1, ordering: .relaxed)
          return await AsyncReads.lazy.get()
        }
      }
      var serials: Set<Int> = []
      for await stack in group { serials.insert(stack.serial) }
      #expect(serials.count == 1)
    }
    // Blocking reads would have jammed the cooperative pool, a thread or so a core, before
    // every task could start: the builder would have given up waiting for them.
    let allStarted = AsyncReads.allStartedBeforeBuild.load(ordering: .relaxed)
    #expect(allStarted)
    #expect(await AsyncReads.lazy.get().builtInMainContext)
  }

  @Test("get() hands a builder's error to its own reader, and the next get() builds again")
  func asyncReaderGetsItsError() async throws {
    await #expect(throws: LazyBuildFailed(attempt: 1)) {
      try await AsyncReads.failingOnce.get()
    }
    let value = try await AsyncReads.failingOnce.get()
    #expect(value == 2)
  }

  @Test("a value that is not Sendable is built and read on the main actor")
  @MainActor
  func mainActorValue() {
    Values.mainOnly.value.uses += 1
    Values.mainOnly.value.uses += 1
    #expect(Values.mainOnly.value.uses == 2)
  }
}

/// A lazy value whose builder reads itself.
enum SelfReadingLazy {
  static let declarationLine: UInt = #line + 1
  static let value: MainLazy<Int, Never> = MainLazy { SelfReadingLazy.value.value + 1 }
}

/// A synchronous read, as a thread outside the cooperative pool makes it.
private func readSelfReadingLazy() {
  _ = SelfReadingLazy.value.value
}

/// Lazy values read with `get()`.
private enum AsyncReads {
  static let readers = 64
  static let started = Atomic(0)
  static let allStartedBeforeBuild = Atomic(false)
  static let failingOnceAttempts = Atomic(0)

  static let lazy = MainLazy {
    let all = waitUntil(timeout: .seconds(10)) { started.load(ordering: .relaxed) >= readers }
    allStartedBeforeBuild.store(all, ordering: .relaxed)
    return Stack(serial: -1)
  }

  static let failingOnce = MainLazy { () throws(LazyBuildFailed) -> Int in
    let attempt = failingOnceAttempts.add(1, ordering: .relaxed).newValue
    if attempt == 1 { throw LazyBuildFailed(attempt: attempt) }
    return attempt
  }
}

@Suite("MainLazy misuse")
struct MainLazyMisuseTests {
  /// The body of an exit test of `builderReadsItself`, in the exit test's process.
  private static func builderReadsItselfInItsProcess() async throws {
    boundExitTest()
    readSelfReadingLazy()
  }

  @Test("a builder that reads its own value stops with a message", .exitTest)
  func builderReadsItself() async {
    #if compiler(>=6.2)
      let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        try await Self.builderReadsItselfInItsProcess()
      }
    #else
      let result = await expectProcessExit(.failure) {
        try await Self.builderReadsItselfInItsProcess()
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(
      text.contains(
        "MainOnce: MainLazy<Int> declared at MainOnceTests/MainLazyTests.swift:"
          + "\(SelfReadingLazy.declarationLine) read its own value while building it"
      ), "\(text)")
  }
}
