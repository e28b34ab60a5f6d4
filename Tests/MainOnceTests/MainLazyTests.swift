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
    let value = try Values.failingThrice.value
    #expect(value == 4)
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

@Suite("MainLazy misuse")
struct MainLazyMisuseTests {
  @Test("a builder that reads its own value stops with a message")
  func builderReadsItself() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      boundExitTest()
      _ = SelfReadingLazy.value.value
    }
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(
      text.contains(
        "MainOnce: MainLazy<Int> declared at MainOnceTests/MainLazyTests.swift:"
          + "\(SelfReadingLazy.declarationLine) read its own value while building it"
      ), "\(text)")
  }
}
