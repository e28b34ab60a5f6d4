// MARK: - The state machine of a `runOnce(for:)` call site
//
// Every decision `RunOnceCell` makes: who runs the body, who waits, who runs next after a body
// threw, when the call site is done. Plain data and pure transitions, which return the effects
// to perform (`RunOnceEffects`, a fixed-size value: the callers answered are a batch threaded
// through their waiters); the interpreter at the end of this file performs them, under
// `RunOnceCell`'s lock and after it, in the cell (`RunOnceCell.swift`) and in
// `Tests/MainOnceTests/RunOnceMachineTests.swift`, which runs both over every state small
// configurations reach, against a scripted parker and word (a caller's body runs on its own
// thread, so there is no hop and no main queue).
//
// | Phase   | word | runner   | waiting        |
// | ------- | ---- | -------- | -------------- |
// | fresh   | 1    | nil      | none           |
// | running | 1    | a thread | in arrival order |
// | done    | 0    | nil      | none           |
//
// The transitions, every one the exhaustive test observes and no other (it compares this table
// with what it observes):
//
// | From    | Event               | To      |
// | ------- | ------------------- | ------- |
// | fresh   | a caller arrives    | running |
// | running | a caller arrives    | running |
// | running | the body throws     | running |
// | running | the body throws     | fresh   |
// | running | the body returns    | done    |
// | done    | a caller arrives    | done    |
//
// A body that throws hands the turn to the caller that has waited longest, which runs its own
// body; with nobody waiting the call site is fresh again. Safety, checked in every state: at
// most one body returns and none runs after it; one body runs at a time; no caller is told
// twice; a caller on the runner's thread is re-entrant. Liveness: every caller is answered once
// nothing more can happen.

/// The state of a `runOnce(for:)` call site that is not done, and its transitions. Plain data;
/// every method is called under `RunOnceCell.lock`.
struct RunOnceMachine<Callers: CallerBatch, Thread: Equatable> {
  typealias Caller = Callers.Element
  typealias Effects = RunOnceEffects<Callers>

  /// The thread whose body runs.
  private(set) var runner: Thread
  /// The callers parked until the runner's body returns or throws, in arrival order.
  private(set) var waiting = Callers()

  /// A machine whose first body runs on `thread`.
  init(runner thread: Thread) {
    runner = thread
  }

  /// What a caller that arrives while a body runs does.
  enum Arrival {
    /// It waits for the runner.
    case wait
    /// It is on the runner's thread: a call from inside the body.
    case reentrant
  }

  /// A caller on `thread` arrives while a body runs.
  mutating func arrive(_ caller: Caller, on thread: Thread) -> Arrival {
    if thread == runner { return .reentrant }
    waiting.append(caller)
    return .wait
  }

  /// The runner's body threw: the caller that has waited longest gets the turn (its thread
  /// becomes the runner); if nobody waits, the run ends and the call site is fresh again.
  mutating func bodyThrew(threadOf: (Caller) -> Thread) -> Effects {
    guard let next = waiting.removeFirst() else { return Effects(endsRun: true) }
    runner = threadOf(next)
    var effects = Effects(turn: .yours)
    effects.answered.append(next)
    return effects
  }

  /// The runner's body returned: the call site is done, the run ends, and every waiting caller
  /// is answered as done, in arrival order.
  mutating func bodyReturned() -> Effects {
    var effects = Effects(turn: .done, publishes: true, endsRun: true)
    while let caller = waiting.removeFirst() { effects.answered.append(caller) }
    return effects
  }
}

extension RunOnceMachine: Equatable where Callers: Equatable {}
extension RunOnceMachine: Hashable where Callers: Hashable, Thread: Hashable {}

/// What a waiting caller is told: the call site is done, or its body runs next.
enum RunOnceTurn: Hashable, Sendable {
  case done
  case yours
}

// MARK: - What a transition asks for, and the interpreter that does it
//
// | Effect                          | Where                      | Why there                                     |
// | ------------------------------- | -------------------------- | --------------------------------------------- |
// | publish: the word becomes 0     | under the lock, first      | a releasing store after the body returned: every caller that finds it done, on the fast path or under the lock, sees the body's writes |
// | record each caller's turn       | under the lock             | a caller reads its turn only after its wake   |
// | end the run                     | under the lock             | the next caller finds the call site fresh, or done, under the same lock |
// | unpark each caller answered     | after the lock             | a woken caller must not find the lock held; nothing touches it after its wake |

/// What one transition of a `runOnce(for:)` run asks for: decided by ``RunOnceMachine``,
/// performed by the interpreter below.
struct RunOnceEffects<Callers: CallerBatch> {
  /// The callers the transition answers, in order, each with ``turn``.
  var answered = Callers()
  var turn = RunOnceTurn.done
  /// The body returned: the call site is done.
  var publishes = false
  /// The run is over: the call site is fresh again, or done.
  var endsRun = false

  /// Performs the effects that belong under the lock, in the order of the table above.
  func performUnderLock<Shell: RunOnceShell>(
    in shell: inout Shell, holding held: borrowing RunOnceCell.LockHeld
  ) where Shell.Callers == Callers {
    if publishes { shell.publish(holding: held) }
    for caller in answered { shell.record(turn, of: caller, holding: held) }
    if endsRun { shell.endRun(holding: held) }
  }

  /// Performs the rest once the lock is released.
  consuming func performAfterLock<Shell: RunOnceShell>(in shell: inout Shell)
  where Shell.Callers == Callers {
    while let caller = answered.removeFirst() { shell.unpark(caller) }
  }
}

/// Where a run's effects are performed: the cell, its word and its parked callers
/// (`RunOnceCell.swift`), or a model's.
protocol RunOnceShell {
  associatedtype Callers: CallerBatch

  /// Stores the done word, with a releasing store.
  mutating func publish(holding held: borrowing RunOnceCell.LockHeld)
  /// Records what `caller` is told: from here on it is answered.
  mutating func record(
    _ turn: RunOnceTurn, of caller: Callers.Element, holding held: borrowing RunOnceCell.LockHeld)
  /// Drops the run.
  mutating func endRun(holding held: borrowing RunOnceCell.LockHeld)
  /// Wakes the parked caller.
  mutating func unpark(_ caller: Callers.Element)
}
