import Dispatch
import Foundation
import MainOnce
import Synchronization
import Testing

private struct SetupFailed: Error, Equatable {}

@Suite("onceOnMain with a completion handler")
struct CompletionFormTests {
  enum Tokens {
    static let ordered = MainOnceToken("ordered completions")
    static let racing = MainOnceToken("racing completions")
    static let failing = MainOnceToken("failing completion")
  }

  @Test("handlers run once each, in the order the calls arrived, on the given queue")
  func handlersRunInArrivalOrder() async {
    let started = DispatchSemaphore(value: 0)
    let release = DispatchSemaphore(value: 0)
    Thread {
      onceOnMain(token: Tokens.ordered) {
        started.signal()
        release.wait()
      }
    }.start()
    guard await wait(for: started) else { return }

    let queue = DispatchQueue(label: "completions")
    let key = DispatchSpecificKey<Bool>()
    queue.setSpecific(key: key, value: true)
    let order = Recorder<Int>()
    let onQueue = Recorder<Bool>()
    let handled = DispatchGroup()
    @Sendable func call(_ index: Int) {
      handled.enter()
      onceOnMain(token: Tokens.ordered, completionQueue: queue) {
        order.record(-1)  // never runs: the blocked initializer succeeds
      } completion: {
        order.record(index)
        onQueue.record(DispatchQueue.getSpecific(key: key) == true)
        handled.leave()
      }
    }
    for index in 0..<2_000 { call(index) }  // queued behind the running initializer
    release.signal()
    // Calls racing with the finish, and then after it: their handlers come after the queued ones.
    await onThread {
      for index in 2_000..<4_000 { call(index) }
    }
    let finished = await onThread { handled.wait(timeout: .now() + 10) == .success }
    #expect(finished)
    #expect(order.recorded == Array(0..<4_000))
    #expect(onQueue.recorded.allSatisfy { $0 })
  }

  @Test("many callers on many threads cause one run, and every handler runs once")
  func racingCallersRunOnce() async {
    let runs = Recorder<Int>()
    let handlers = Recorder<Int>()
    let handled = DispatchGroup()
    for _ in 0..<64 { handled.enter() }
    await raceThreads(8) { thread in
      for call in 0..<8 {
        onceOnMain(token: Tokens.racing, completionQueue: .global()) {
          runs.record(thread)
        } completion: {
          handlers.record(thread * 8 + call)
          handled.leave()
        }
      }
    }
    let finished = await onThread { handled.wait(timeout: .now() + 10) == .success }
    #expect(finished)
    #expect(runs.count == 1)
    #expect(handlers.recorded.sorted() == Array(0..<64))
  }

  @Test("a failing initializer's error goes to its own handler, and the next caller's runs")
  func failureGoesToItsOwnHandler() async {
    let outcomes = Recorder<String>()
    let handled = DispatchGroup()
    handled.enter()
    handled.enter()
    onceOnMain(token: Tokens.failing, completionQueue: .global()) { () throws(SetupFailed) in
      throw SetupFailed()
    } completion: { result in
      outcomes.record((try? result.get()) == nil ? "first failed" : "first succeeded")
      handled.leave()
    }
    onceOnMain(token: Tokens.failing, completionQueue: .global()) { () throws(SetupFailed) in
    } completion: { result in
      outcomes.record((try? result.get()) != nil ? "second succeeded" : "second failed")
      handled.leave()
    }
    let finished = await onThread { handled.wait(timeout: .now() + 10) == .success }
    #expect(finished)
    #expect(Set(outcomes.recorded) == ["first failed", "second succeeded"])
  }
}
