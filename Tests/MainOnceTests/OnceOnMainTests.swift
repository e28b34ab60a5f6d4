import Dispatch
import Foundation
import MainOnceFixtureSupport
import Synchronization
import Testing

@testable import MainOnce

private struct Failure: Error, Equatable {
  let caller: Int
}

@Suite("onceOnMain", .testProcessSettings)
struct OnceOnMainTests {
  enum Tokens {
    static let race = MainOnceToken("race")
    static let mainActor = MainOnceToken("main actor")
    static let retry = MainOnceToken("retry")
    static let handover = MainOnceToken("handover")
    static let racingFailures = MainOnceToken("racing failures")
    static let lateBlocking = MainOnceToken("late blocking caller")
    static let lateAsync = MainOnceToken("late async caller")
  }

  @Test("initializer runs once when eight threads race")
  func racingThreads() async {
    let tally = RaceTally(hold: 5_000)
    await raceThreads(8) { _ in
      onceOnMain(token: Tokens.race) { tally.initialize() }
      tally.returned()
    }
    #expect(tally.runs.load(ordering: .relaxed) == 1)
    #expect(tally.earlyReturns.load(ordering: .relaxed) == 0)
    let ranInMainContext = tally.ranInMainContext.load(ordering: .relaxed)
    #expect(ranInMainContext)
  }

  @Test(
    "a caller that arrives while the initializer runs returns only after it has finished",
    arguments: [false, true])
  func lateCallerWaits(isAsync: Bool) async {
    let started = DispatchSemaphore(value: 0)
    let tally = RaceTally()
    let name = isAsync ? "\"late async caller\"" : "\"late blocking caller\""
    let initializer: @MainActor @Sendable () -> Void = {
      started.signal()
      // Until the late caller waits too (bounded: a failing test must not block main).
      _ = waitUntil { callersWaiting { $0.contains(name) } >= 2 }
      tally.initialize()
    }
    Thread {
      if isAsync {
        onceOnMain(token: Tokens.lateAsync, initializer)
      } else {
        onceOnMain(token: Tokens.lateBlocking, initializer)
      }
    }.start()
    guard await wait(for: started) else { return }
    // The initializer is running now; this caller arrives in the middle of it.
    if isAsync {
      await #expect(throws: Never.self) {
        try await withinTimeLimit { try await onceOnMain(token: Tokens.lateAsync) {} }
      }
    } else {
      await onThread { onceOnMain(token: Tokens.lateBlocking) {} }
    }
    tally.returned()
    #expect(tally.earlyReturns.load(ordering: .relaxed) == 0)
    #expect(tally.runs.load(ordering: .relaxed) == 1)
  }

  @Test("a main-actor caller runs the initializer in place")
  @MainActor
  func mainActorCallerRunsInPlace() {
    let caller = pthread_self()
    var ranOn: pthread_t?
    onceOnMain(token: Tokens.mainActor) { ranOn = pthread_self() }
    #expect(ranOn == caller)
  }

  @Test("a throwing initializer leaves the token fresh, and the next call runs again")
  func throwingInitializerRetries() async {
    let attempts = Atomic(0)
    let first = await onThread {
      Result { () throws(Failure) in
        try onceOnMain(token: Tokens.retry) { () throws(Failure) in
          attempts.add(1, ordering: .relaxed)
          throw Failure(caller: 1)
        }
      }
    }
    #expect(throws: Failure(caller: 1)) { try first?.get() }
    await onThread {
      onceOnMain(token: Tokens.retry) { attempts.add(1, ordering: .relaxed) }
      onceOnMain(token: Tokens.retry) { attempts.add(1, ordering: .relaxed) }
    }
    #expect(attempts.load(ordering: .relaxed) == 2)
  }

  @Test("callers waiting on a failed attempt run the next attempt themselves")
  func waitersRunTheNextAttempt() async throws {
    await holdingTheMainQueue { turn in
      let firstStarted = DispatchSemaphore(value: 0)
      let releaseFirst = DispatchSemaphore(value: 0)
      let runs = Atomic(0)
      let outcomes = Locked<[Int: Result<Void, Failure>]>([:])

      let first = Thread {
        let result = Result { () throws(Failure) in
          try onceOnMain(token: Tokens.handover) { () throws(Failure) in
            runs.add(1, ordering: .relaxed)
            firstStarted.signal()
            holdMainQueue(until: releaseFirst, turn)
            throw Failure(caller: 0)
          }
        }
        outcomes.withLock { $0[0] = result }
      }
      first.start()
      // On a thread of its own, from the moment the failing attempt holds the main queue to its
      // release: the hold's length depends on nothing that waits for the cooperative pool. Two
      // more callers queue up behind it; then it fails.
      let queued = await onThread { () -> Bool in
        defer { releaseFirst.signal() }
        guard firstStarted.wait(timeout: .now() + TimeScale.seconds(10)) == .success else {
          return false
        }
        for caller in 1...2 {
          Thread {
            let result = Result { () throws(Failure) in
              try onceOnMain(token: Tokens.handover) { () throws(Failure) in
                runs.add(1, ordering: .relaxed)
              }
            }
            outcomes.withLock { $0[caller] = result }
          }.start()
        }
        return waitUntil { waitingCallers(labelContaining: "\"handover\"") >= 2 }
      }
      #expect(queued == true, "two callers did not queue behind the failing attempt")
      let allReturned = await onThread {
        waitUntil { outcomes.withLock { $0.count } == 3 }
      }
      guard allReturned == true else {
        Issue.record("the first caller did not return")
        return
      }
      let results = outcomes.withLock { $0 }
      #expect(throws: Failure(caller: 0)) { try results[0]!.get() }
      #expect(throws: Never.self) { try results[1]!.get() }
      #expect(throws: Never.self) { try results[2]!.get() }
      #expect(runs.load(ordering: .relaxed) == 2, "the failing attempt and one successful attempt")
    }
  }

  @Test("each error reaches only the caller whose initializer threw it")
  func errorsReachTheirOwnCallers() async {
    let attempts = Atomic(0)
    let successes = Atomic(0)
    let wrongErrors = Atomic(0)
    let failures = Atomic(0)
    await raceThreads(8) { caller in
      do throws(Failure) {
        try onceOnMain(token: Tokens.racingFailures) { () throws(Failure) in
          let attempt = attempts.add(1, ordering: .relaxed).newValue
          // Hold each attempt until the callers that have made none are queued behind it, so
          // that failures meet waiting callers. Bounded and unchecked: a caller that comes
          // late only makes the race smaller, and nothing below depends on it.
          _ = waitUntil(timeout: .milliseconds(200)) {
            waitingCallers(labelContaining: "racing failures") >= 8 - attempt
          }
          // The first three attempts fail, whoever makes them.
          if attempt <= 3 { throw Failure(caller: caller) }
          successes.add(1, ordering: .relaxed)
        }
      } catch {
        failures.add(1, ordering: .relaxed)
        if error.caller != caller { wrongErrors.add(1, ordering: .relaxed) }
      }
    }
    #expect(successes.load(ordering: .relaxed) == 1)
    #expect(failures.load(ordering: .relaxed) == 3)
    #expect(wrongErrors.load(ordering: .relaxed) == 0)
    #expect(attempts.load(ordering: .relaxed) == 4)
  }

  @Test("many tokens, threads and main-queue callers race with no double run or early return")
  func stress() async {
    let outcome = await onThread(timeout: Stress.isLong ? .seconds(1_200) : .seconds(60)) {
      Stress.run(rounds: Stress.isLong ? 1_800 : 20)
    }
    #expect((outcome?.uses ?? 0) >= (Stress.isLong ? 1_000_000 : 10_000))
    #expect(outcome?.isClean == true, "\(outcome.map { "\($0)" } ?? "no outcome")")
  }
}

/// How many callers wait, queued behind the running initializer or body, for the cell whose
/// label contains `text`: found through the waits blocked threads publish, and counted by the
/// cell under its own lock.
func waitingCallers(labelContaining text: String) -> Int {
  let cells = WaitBoard.read { published in
    published.compactMap { entry -> AnyObject? in
      if let waiter = entry.wait as? Waiter, !waiter.isOver,
        waiter.label.description.contains(text)
      {
        return OnceCell.withLock { waiter.gate(holding: $0) }
      }
      if let waiter = entry.wait as? RunOnceCell.Waiter, !waiter.isOver,
        waiter.cell.label.description.contains(text)
      {
        return waiter.cell
      }
      return nil
    }
  }
  if let gate = cells.first as? Gate {
    return OnceCell.withLock { held in
      gate.callers(holding: held).filter { $0.phase(holding: held) == .queued }.count
    }
  }
  if let cell = cells.first as? RunOnceCell {
    return RunOnceCell.withLock { held in
      cell.withRun(holding: held) { $0 }.map { run in
        run.withMachine(holding: held) { Array($0.waiting).count }
      } ?? 0
    }
  }
  return 0
}
