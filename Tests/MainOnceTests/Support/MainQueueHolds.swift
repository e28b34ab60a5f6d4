import Foundation
import MainOnce
import MainOnceFixtureSupport
import Testing

/// A test's turn to hold the main queue on purpose: only ``holdingTheMainQueue(_:)`` makes one,
/// and every hold takes one, so at most one test in this process holds the main queue at a time.
///
/// The main queue runs its blocks in the order they came. Two tests that each queued a hold
/// (an initializer that waits until other callers have queued up behind it) held it one after
/// the other, and a block that came between them waited for both; with more, for all of them.
/// On a loaded machine, where a hold lasts up to its bound (``TestProcessSettings/mainQueueHold``,
/// half of every other test's time limit for main-queue work), that passed the others' limits:
/// their initializers finished after 35–45 s. With one hold at a time, a block waits for at most
/// one, whose bound leaves it half its limit.
struct MainQueueTurn: Sendable {
  fileprivate init() {}
}

/// Runs `body`, a test that holds the main queue on purpose, once no other test does (waiting
/// without blocking a thread), and gives it the turn its holds take.
func holdingTheMainQueue<Result>(
  _ body: (MainQueueTurn) async throws -> Result
) async rethrows -> Result {
  await MainQueueTurn.turns.take()
  defer { MainQueueTurn.turns.give() }
  return try await body(MainQueueTurn())
}

extension MainQueueTurn {
  fileprivate static let turns = TaskSlots(1)
}

/// Holds the main queue (the caller is in main context: an initializer or a body that runs
/// there) until `release` is signalled, for at most ``TestProcessSettings/mainQueueHold``.
/// `turn` is not read: it is the proof that this test holds the main queue alone.
///
/// A hold that lasts its whole bound is an issue of its own, named by where it was held: its
/// release waited for something it must not (the cooperative pool, most likely), and every test
/// waiting for the main queue meanwhile lost that time from its own bound. Such a hold once
/// passed its own test and failed others'.
func holdMainQueue(
  until release: DispatchSemaphore, _ turn: MainQueueTurn,
  sourceLocation: SourceLocation = #_sourceLocation
) {
  let bound = TestProcessSettings.mainQueueHold
  if release.wait(timeout: .now() + bound.seconds) == .timedOut {
    Issue.record(
      "the main queue was held for the whole bound, \(bound): its release came late",
      sourceLocation: sourceLocation)
  }
}

/// A blocking caller whose initializer holds the main queue while the test acts on the callers
/// that queue behind it. The whole hold runs on threads of its own, and what the test starts
/// meanwhile runs on the turn's executor (``MainQueueTurn/task(_:)``): its length depends on
/// nothing that waits for the cooperative pool. A hold released by the test's own task, which
/// needs the pool to go on, once lasted its whole bound on a loaded machine, and every test
/// waiting for the main queue failed with it.
enum MainQueueHold {
  /// Calls `call`, on a thread of its own, with an initializer that records `0` in `runs` and
  /// then holds the main queue; once it holds it, runs `whileHeld` on another thread, ends the
  /// hold as that returns, and returns what it returned. Returns `nil` (with an issue) if the
  /// initializer never starts.
  static func run<Outcome: Sendable>(
    runs: Recorder<Int>, _ turn: MainQueueTurn,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ call: @escaping @Sendable (_ initializer: @escaping @MainActor @Sendable () -> Void) -> Void,
    whileHeld: @escaping @Sendable () -> Outcome
  ) async -> Outcome? {
    let release = DispatchSemaphore(value: 0)
    let started = DispatchSemaphore(value: 0)
    Thread {
      call {
        runs.record(0)
        started.signal()
        holdMainQueue(until: release, turn, sourceLocation: sourceLocation)
      }
    }.start()
    let outcome = await onThread(sourceLocation: sourceLocation) { () -> Outcome? in
      defer { release.signal() }
      guard started.wait(timeout: .now() + TimeScale.seconds(10)) == .success else { return nil }
      return whileHeld()
    }
    // `nil` if the thread did not return in time, as `onThread` has recorded.
    guard let outcome else { return nil }
    if case .none = outcome {
      Issue.record("the initializer did not start", sourceLocation: sourceLocation)
    }
    return outcome
  }
}

extension MainQueueTurn {
  /// Starts `operation` as a task on an executor of the turn's own, not the cooperative pool:
  /// a caller that a test starts while it holds the main queue queues up, and is answered,
  /// however busy the pool is.
  func task<Success: Sendable>(
    _ operation: @escaping @Sendable () async throws -> Success
  ) -> Task<Success, any Error> {
    Task(executorPreference: HoldExecutor.shared, operation: operation)
  }
}

/// The executor behind ``MainQueueTurn/task(_:)``: a serial queue, whose thread libdispatch
/// starts for it outside the cooperative pool. Its jobs are short: the tasks only call and wait.
final class HoldExecutor: TaskExecutor {
  static let shared = HoldExecutor()
  private let queue = DispatchQueue(label: "MainOnceTests main-queue hold")
  private static let marker = DispatchSpecificKey<Bool>()

  private init() { queue.setSpecific(key: Self.marker, value: true) }

  /// Whether the caller runs a job of this executor.
  static var isCurrent: Bool { DispatchQueue.getSpecific(key: marker) == true }

  func enqueue(_ job: consuming ExecutorJob) {
    let job = UnownedJob(job)
    queue.async { [self] in job.runSynchronously(on: asUnownedTaskExecutor()) }
  }
}
