import Dispatch
import Foundation
import MainOnceFixtureSupport
import Synchronization
import Testing

@testable import MainOnce

private struct AttemptFailed: Error, Equatable {
  let caller: Int
}

@Suite("await onceOnMain", .testProcessSettings)
struct AsyncOnceOnMainTests {
  enum Tokens {
    static let mixedRace = MainOnceToken("mixed race")
    static let mainActor = MainOnceToken("async main actor")
    static let cancellation = MainOnceToken("cancellation")
    static let retries = MainOnceToken("async retries")
    static let cancelledBeforeAsking = MainOnceToken("cancelled before asking")
    static let doneThenCancelled = MainOnceToken("done, then called by a cancelled task")
  }

  @Test("async tasks and blocking threads racing on one token run the initializer once")
  func tasksAndThreadsRace() async {
    let tally = RaceTally(hold: 5_000)
    // A task, not `async let`: Swift 6.0's compiler crashed on the `async let` (its move-only
    // checker, on the token borrowed in the closure).
    let threads = Task {
      await raceThreads(8) { _ in
        onceOnMain(token: Tokens.mixedRace) { tally.initialize() }
        tally.returned()
      }
    }
    let tasks = (0..<8).map { _ in
      Task {
        try await onceOnMain(token: Tokens.mixedRace) { tally.initialize() }
        tally.returned()
      }
    }
    for task in tasks {
      await #expect(throws: Never.self) { try await withinTimeLimit { try await task.value } }
    }
    _ = await threads.value
    #expect(tally.runs.load(ordering: .relaxed) == 1)
    #expect(tally.earlyReturns.load(ordering: .relaxed) == 0)
  }

  @Test("a main-actor caller runs the initializer in place, without suspending")
  @MainActor
  func mainActorRunsInPlace() async throws {
    let caller = pthread_self()
    let ranOn = Locked<pthread_t?>(nil)
    // Queued on the main actor before the call: it can only run if the call suspends.
    var interleaved = false
    let other = Task { @MainActor in interleaved = true }
    try await onceOnMain(token: Tokens.mainActor) {
      ranOn.withLock { $0 = pthread_self() }
    }
    #expect(!interleaved, "the call suspended")
    #expect(ranOn.withLock { $0 } == caller)
    await other.value
  }

  @Test("a cancelled waiter throws CancellationError while the initialization goes on")
  func cancelledWaiter() async throws {
    try await holdingTheMainQueue { turn in
      let runs = Recorder<Int>()
      guard
        let hold = await MainQueueHold.start(
          runs: runs, turn,
          {
            onceOnMain(token: Tokens.cancellation, $0)
          })
      else { return }
      defer { hold.release.signal() }
      let waiter = Task {
        try await onceOnMain(token: Tokens.cancellation) { runs.record(1) }
      }
      let other = Task {
        try await onceOnMain(token: Tokens.cancellation) { runs.record(2) }
      }
      // Both wait behind the hold's caller, whose initializer runs.
      _ = await eventually { callersWaiting { $0.contains("\"cancellation\"") } == 3 }
      waiter.cancel()
      await #expect(throws: CancellationError.self) {
        try await withinTimeLimit { try await waiter.value }
      }
      hold.release.signal()
      // The other waiter was not cancelled with it: it returns once the initialization is done.
      await #expect(throws: Never.self) { try await withinTimeLimit { try await other.value } }
      // The initialization finished, and it was the first caller's: the cancelled one never ran.
      try await withinTimeLimit {
        try await onceOnMain(token: Tokens.cancellation) { runs.record(3) }
      }
      #expect(runs.recorded == [0])
    }
  }

  @Test("after failed attempts, queued async callers run theirs in turn; none is lost")
  func failuresHandOverToAsyncWaiters() async throws {
    await holdingTheMainQueue { turn in
      let started = DispatchSemaphore(value: 0)
      let release = DispatchSemaphore(value: 0)
      let attempts = Recorder<Int>()
      let first = Task.detached {
        try await onThread {
          Result { () throws(AttemptFailed) in
            try onceOnMain(token: Tokens.retries) { () throws(AttemptFailed) in
              attempts.record(0)
              started.signal()
              holdMainQueue(until: release, turn)
              throw AttemptFailed(caller: 0)
            }
          }
        }?.get()
      }
      guard await wait(for: started) else { return }
      defer { release.signal() }
      // Released from a thread of its own once the five below wait, not from this task: the
      // hold's length depends on nothing that waits for the cooperative pool after they queue.
      // Only that thread looks for the fifth: once it releases, the count falls.
      Thread {
        _ = waitUntil { callersWaiting { $0.contains("\"async retries\"") } == 6 }
        release.signal()
      }.start()
      // Callers 1 and 2 fail too; caller 3 succeeds; callers 4 and 5 never run.
      var waiters: [Task<Void, any Error>] = []
      for caller in 1...5 {
        waiters.append(
          Task {
            try await onceOnMain(token: Tokens.retries) {
              attempts.record(caller)
              if caller < 3 { throw AttemptFailed(caller: caller) }
            }
          })
        // Queued behind the first caller and those before it: they arrive in order.
        guard caller < 5 else { break }
        _ = await eventually { callersWaiting { $0.contains("\"async retries\"") } == caller + 1 }
      }
      await #expect(throws: AttemptFailed(caller: 0)) {
        try await withinTimeLimit { try await first.value }
      }
      for (index, waiter) in waiters.enumerated() {
        let caller = index + 1
        if caller < 3 {
          await #expect(throws: AttemptFailed(caller: caller)) {
            try await withinTimeLimit { try await waiter.value }
          }
        } else {
          await #expect(throws: Never.self) { try await withinTimeLimit { try await waiter.value } }
        }
      }
      #expect(attempts.recorded == [0, 1, 2, 3])
    }
  }

  @Test("a done token returns at once, also to a cancelled task")
  func doneTokenIgnoresCancellation() async throws {
    try await withinTimeLimit { try await onceOnMain(token: Tokens.doneThenCancelled) {} }
    let caller = Task.detached {
      withUnsafeCurrentTask { $0?.cancel() }
      try await onceOnMain(token: Tokens.doneThenCancelled) {
        Issue.record("the initializer ran again")
      }
    }
    await #expect(throws: Never.self) { try await withinTimeLimit { try await caller.value } }
  }

  @Test("a task cancelled before it calls ends with CancellationError at once, and never runs")
  func cancelledBeforeAsking() async throws {
    try await holdingTheMainQueue { turn in
      let runs = Recorder<Int>()
      guard
        let hold = await MainQueueHold.start(
          runs: runs, turn,
          {
            onceOnMain(token: Tokens.cancelledBeforeAsking, $0)
          })
      else { return }
      defer { hold.release.signal() }
      let caller = Task.detached {
        withUnsafeCurrentTask { $0?.cancel() }
        try await onceOnMain(token: Tokens.cancelledBeforeAsking) { runs.record(1) }
      }
      // While the initializer still holds the main queue: only cancellation can answer it.
      await #expect(throws: CancellationError.self) {
        try await withinTimeLimit(.seconds(2)) { try await caller.value }
      }
      hold.release.signal()
      try await withinTimeLimit {
        try await onceOnMain(token: Tokens.cancelledBeforeAsking) { runs.record(2) }
      }
      #expect(runs.recorded == [0])
    }
  }
}
