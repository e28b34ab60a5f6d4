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
      let waiterEnded = DispatchSemaphore(value: 0)
      let callers = await MainQueueHold.run(
        runs: runs, turn, { onceOnMain(token: Tokens.cancellation, $0) }
      ) { () -> (waiter: Task<Void, any Error>, other: Task<Void, any Error>, answered: Bool) in
        let waiter = turn.task {
          defer { waiterEnded.signal() }
          try await onceOnMain(token: Tokens.cancellation) { runs.record(1) }
        }
        let other = turn.task {
          try await onceOnMain(token: Tokens.cancellation) { runs.record(2) }
        }
        // Both wait behind the hold's caller, whose initializer runs; then one is cancelled,
        // and answered before the hold ends.
        guard waitUntil({ callersWaiting { $0.contains("\"cancellation\"") } == 3 }) else {
          return (waiter, other, false)
        }
        waiter.cancel()
        let answered = waiterEnded.wait(timeout: .now() + TimeScale.seconds(10)) == .success
        return (waiter, other, answered)
      }
      guard let callers else { return }
      #expect(callers.answered, "the cancelled waiter was not answered while the initializer ran")
      await #expect(throws: CancellationError.self) {
        try await withinTimeLimit { try await callers.waiter.value }
      }
      // The other waiter was not cancelled with it: it returns once the initialization is done.
      await #expect(throws: Never.self) {
        try await withinTimeLimit { try await callers.other.value }
      }
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
      // On a thread of its own, from the moment the first caller's initializer holds the main
      // queue to its release, with the callers on the turn's executor: the hold's length depends
      // on nothing that waits for the cooperative pool.
      let queued = await onThread { () -> (waiters: [Task<Void, any Error>], inOrder: Bool) in
        defer { release.signal() }
        guard started.wait(timeout: .now() + TimeScale.seconds(10)) == .success else {
          return ([], false)
        }
        // Callers 1 and 2 fail too; caller 3 succeeds; callers 4 and 5 never run.
        var waiters: [Task<Void, any Error>] = []
        for caller in 1...5 {
          waiters.append(
            turn.task {
              try await onceOnMain(token: Tokens.retries) {
                attempts.record(caller)
                if caller < 3 { throw AttemptFailed(caller: caller) }
              }
            })
          // Queued behind the first caller and those before it: they arrive in order.
          guard waitUntil({ callersWaiting { $0.contains("\"async retries\"") } == caller + 1 })
          else { return (waiters, false) }
        }
        return (waiters, true)
      }
      guard let queued else { return }
      #expect(queued.inOrder, "the callers did not queue behind the first one, one by one")
      let waiters = queued.waiters
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
      let outcome = await MainQueueHold.run(
        runs: runs, turn, { onceOnMain(token: Tokens.cancelledBeforeAsking, $0) }
      ) { () -> Result<Void, any Error>? in
        let answer = Locked<Result<Void, any Error>?>(nil)
        let ended = DispatchSemaphore(value: 0)
        _ = turn.task {
          withUnsafeCurrentTask { $0?.cancel() }
          let result = await Result {
            try await onceOnMain(token: Tokens.cancelledBeforeAsking) { runs.record(1) }
          }
          answer.withLock { $0 = result }
          ended.signal()
        }
        // While the initializer still holds the main queue: only cancellation can answer it.
        _ = ended.wait(timeout: .now() + TimeScale.seconds(2))
        return answer.withLock { $0 }
      }
      guard let outcome else { return }
      guard let outcome else {
        Issue.record("the cancelled caller was not answered while the initializer ran")
        return
      }
      #expect(throws: CancellationError.self) { try outcome.get() }
      try await withinTimeLimit {
        try await onceOnMain(token: Tokens.cancelledBeforeAsking) { runs.record(2) }
      }
      #expect(runs.recorded == [0])
    }
  }
}
