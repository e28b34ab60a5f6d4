import Dispatch
import Foundation
import MainOnce
import MainOnceFixtureSupport
import Synchronization
import Testing

private struct SetupFailed: Error, Equatable {}

@Suite("onceOnMain with a completion handler", .testProcessSettings)
struct CompletionFormTests {
  enum Tokens {
    static let ordered = MainOnceToken("ordered completions")
    static let racing = MainOnceToken("racing completions")
    static let failing = MainOnceToken("failing completion")
    static let failingThenCalled = MainOnceToken("failing completion, called again later")
    static let doneInHandler = MainOnceToken("done in the handler")
    static let reentered = MainOnceToken("completion form inside its own initializer")
  }

  /// Re-entrance stops the blocking forms, whose caller would wait for itself. A completion-form
  /// caller does not wait: its call queues, returns, and is answered when the initializer it
  /// runs inside has returned.
  @Test("called inside its own initializer, the completion form queues and completes after it")
  func completionFormInsideItsOwnInitializer() async {
    let events = Recorder<String>()
    let handled = DispatchSemaphore(value: 0)
    let queue = DispatchQueue(label: "re-entered completions")
    onceOnMain(token: Tokens.reentered, completionQueue: queue) {
      events.record("initializer starts")
      onceOnMain(token: Tokens.reentered, completionQueue: queue) {
        events.record("inner initializer runs")
      } completion: {
        events.record("inner completion, done: \(Tokens.reentered.isDone)")
        handled.signal()
      }
      events.record("initializer returns")
    } completion: {
      events.record("outer completion, done: \(Tokens.reentered.isDone)")
    }
    // The inner completion comes last: submitted after the outer one, to the same serial queue.
    #expect(await wait(for: handled))
    #expect(
      events.recorded == [
        "initializer starts", "initializer returns", "outer completion, done: true",
        "inner completion, done: true",
      ])
  }

  @Test("in its handler the token is done, though no caller has published it yet")
  func tokenIsDoneInHandler() async {
    let seen = Recorder<Bool>()
    let handled = DispatchSemaphore(value: 0)
    let doneBefore = Tokens.doneInHandler.isDone
    #expect(!doneBefore)
    onceOnMain(token: Tokens.doneInHandler, completionQueue: .global()) {
    } completion: {
      seen.record(Tokens.doneInHandler.isDone)
      handled.signal()
    }
    #expect(await wait(for: handled))
    #expect(seen.recorded == [true])
    let doneAfter = Tokens.doneInHandler.isDone
    #expect(doneAfter)
  }

  @Test("handlers run once each, in the order the calls arrived, on the given queue")
  func handlersRunInArrivalOrder() async {
    await holdingTheMainQueue { turn in
      let started = DispatchSemaphore(value: 0)
      let release = DispatchSemaphore(value: 0)
      let initialized = Atomic(false)
      let queue = DispatchQueue(label: "completions")
      let key = DispatchSpecificKey<Bool>()
      queue.setSpecific(key: key, value: true)
      let order = Recorder<Int>()
      let onQueue = Recorder<Bool>()
      let afterInitializer = Recorder<Bool>()
      let handled = DispatchGroup()
      @Sendable func call(_ index: Int) {
        handled.enter()
        onceOnMain(token: Tokens.ordered, completionQueue: queue) {
          order.record(-1)  // never runs: the blocked initializer succeeds
        } completion: {
          order.record(index)
          onQueue.record(DispatchQueue.getSpecific(key: key) == true)
          afterInitializer.record(initialized.load(ordering: .acquiring))
          handled.leave()
        }
      }
      Thread {
        onceOnMain(token: Tokens.ordered) {
          started.signal()
          holdMainQueue(until: release, turn)
          initialized.store(true, ordering: .releasing)
        }
      }.start()
      defer { release.signal() }
      // On a thread of its own, from the moment the initializer holds the main queue to its
      // release: the hold's length depends on nothing that waits for the cooperative pool.
      let held = await onThread { () -> Bool in
        guard started.wait(timeout: .now() + TimeScale.seconds(10)) == .success else {
          return false
        }
        // Queued behind the running initializer: 500, so that the hold stays short (2,000 held
        // the main queue for 7.5 s under ThreadSanitizer on a loaded machine).
        for index in 0..<500 { call(index) }
        release.signal()
        // Calls racing with the finish, and then after it: their handlers come after the queued
        // ones.
        for index in 500..<4_000 { call(index) }
        return true
      }
      guard held == true else {
        Issue.record("the initializer did not start")
        return
      }
      let finished = await onThread {
        handled.wait(timeout: .now() + TimeScale.seconds(10)) == .success
      }
      #expect(finished == true)
      #expect(order.recorded == Array(0..<4_000))
      #expect(onQueue.recorded.allSatisfy { $0 })
      #expect(afterInitializer.recorded.allSatisfy { $0 }, "a handler ran before the initializer")
    }
  }

  @Test("many callers on many threads cause one run, and every handler runs once")
  func racingCallersRunOnce() async {
    let tally = RaceTally(hold: 5_000)
    let handlers = Recorder<Int>()
    let handled = DispatchGroup()
    for _ in 0..<64 { handled.enter() }
    await raceThreads(8) { thread in
      for call in 0..<8 {
        onceOnMain(token: Tokens.racing, completionQueue: .global()) {
          tally.initialize()
        } completion: {
          tally.returned()
          handlers.record(thread * 8 + call)
          handled.leave()
        }
      }
    }
    let finished = await onThread {
      handled.wait(timeout: .now() + TimeScale.seconds(10)) == .success
    }
    #expect(finished == true)
    #expect(tally.runs.load(ordering: .relaxed) == 1)
    #expect(tally.earlyReturns.load(ordering: .relaxed) == 0, "a handler ran before the end")
    #expect(handlers.recorded.sorted() == Array(0..<64))
  }

  @Test(
    "a failing initializer's error goes to its own handler, and the next caller's runs",
    arguments: [false, true])
  func failureGoesToItsOwnHandler(secondArrivesLater: Bool) async {
    let outcomes = Recorder<String>()
    let ran = Recorder<String>()
    let handled = DispatchGroup()
    handled.enter()
    let first: @MainActor @Sendable () throws(SetupFailed) -> Void = { () throws(SetupFailed) in
      ran.record("first")
      throw SetupFailed()
    }
    let second: @MainActor @Sendable () throws(SetupFailed) -> Void = { () throws(SetupFailed) in
      ran.record("second")
    }
    let firstHandler: @Sendable (Result<Void, SetupFailed>) -> Void = { result in
      outcomes.record((try? result.get()) == nil ? "first failed" : "first succeeded")
      handled.leave()
    }
    let secondHandler: @Sendable (Result<Void, SetupFailed>) -> Void = { result in
      outcomes.record((try? result.get()) != nil ? "second succeeded" : "second failed")
      handled.leave()
    }
    if secondArrivesLater {
      // The second call comes after the first failure was delivered: the token must be fresh.
      onceOnMain(
        token: Tokens.failingThenCalled, completionQueue: .global(), first, completion: firstHandler
      )
      let firstHandled = await onThread {
        handled.wait(timeout: .now() + TimeScale.seconds(10)) == .success
      }
      #expect(firstHandled == true)
      handled.enter()
      onceOnMain(
        token: Tokens.failingThenCalled, completionQueue: .global(), second,
        completion: secondHandler)
    } else {
      // The second call queues behind the first: it runs once the first has failed.
      handled.enter()
      onceOnMain(token: Tokens.failing, completionQueue: .global(), first, completion: firstHandler)
      onceOnMain(
        token: Tokens.failing, completionQueue: .global(), second, completion: secondHandler)
    }
    let finished = await onThread {
      handled.wait(timeout: .now() + TimeScale.seconds(10)) == .success
    }
    #expect(finished == true)
    #expect(Set(outcomes.recorded) == ["first failed", "second succeeded"])
    #expect(ran.recorded == ["first", "second"], "the second caller's initializer must run")
  }
}
