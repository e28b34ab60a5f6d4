// MARK: - The state machine of a `runOnce(for:)` call site
//
// Every decision `RunOnceCell` makes: who runs the body, who waits, who runs next after a body
// threw. Plain data and pure transitions, which `RunOnceCell` performs under its lock, and which
// `Tests/MainOnceTests/RunOnceMachineTests.swift` runs over every state small configurations
// reach (a caller's body runs on its own thread, so there is no hop and no main queue).
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
struct RunOnceMachine<Caller, Thread: Equatable> {
  /// The thread whose body runs.
  private(set) var runner: Thread
  /// The callers parked until the runner's body returns or throws, in arrival order.
  private(set) var waiting: [Caller] = []

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
  /// becomes the runner); `nil` if nobody waits, and the call site is fresh again.
  mutating func bodyThrew(threadOf: (Caller) -> Thread) -> Caller? {
    guard !waiting.isEmpty else { return nil }
    let next = waiting.removeFirst()
    runner = threadOf(next)
    return next
  }

  /// The runner's body returned: every waiting caller is done, in arrival order.
  mutating func bodyReturned() -> [Caller] {
    defer { waiting = [] }
    return waiting
  }
}

extension RunOnceMachine: Equatable where Caller: Equatable {}
extension RunOnceMachine: Hashable where Caller: Hashable, Thread: Hashable {}
