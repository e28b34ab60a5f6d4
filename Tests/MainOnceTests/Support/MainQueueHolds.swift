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
/// there) until `release` is signalled, for at most `bound` (a scaled duration). `turn` is not
/// read: it is the proof that this test holds the main queue alone.
func holdMainQueue(
  until release: DispatchSemaphore, _ turn: MainQueueTurn,
  for bound: Duration = TestProcessSettings.mainQueueHold
) {
  _ = release.wait(timeout: .now() + bound.seconds)
}

/// A blocking caller whose initializer holds the main queue until released, so that other
/// callers of its token wait behind it. Bounded, so that a failing test cannot leave the main
/// queue blocked for good: by 10 s (scaled), not ``TestProcessSettings/mainQueueHold``, since
/// what its tests wait for meanwhile (a cancelled task's answer) needs the cooperative pool,
/// and in a busy ThreadSanitizer run the shorter bound ran out before that task ran. It still
/// takes a turn: no other hold is queued behind it.
struct MainQueueHold {
  let release = DispatchSemaphore(value: 0)

  /// Calls `call`, on a thread of its own, with an initializer that records `0` in `runs` and
  /// then holds the main queue; returns once it holds it, or `nil` (with an issue) if it never
  /// does.
  static func start(
    runs: Recorder<Int>, _ turn: MainQueueTurn,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ call: @escaping @Sendable (_ initializer: @escaping @MainActor @Sendable () -> Void) -> Void
  ) async -> MainQueueHold? {
    let hold = MainQueueHold()
    let started = DispatchSemaphore(value: 0)
    Thread {
      call { [release = hold.release] in
        runs.record(0)
        started.signal()
        holdMainQueue(until: release, turn, for: .seconds(10).scaled)
      }
    }.start()
    guard await wait(for: started, sourceLocation: sourceLocation) else { return nil }
    return hold
  }
}
