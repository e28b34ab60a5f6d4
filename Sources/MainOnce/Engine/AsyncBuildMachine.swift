// MARK: - The state machine of an `AsyncMainLazy`
//
// Every decision an `AsyncMainLazy` makes about its builds: who starts one, who joins it, who
// leaves it, who is answered when it ends, when the value is published. Plain data and pure
// transitions, which return the effects to perform (`AsyncBuildEffects`, a fixed-size value:
// the callers answered are a batch threaded through them); the interpreter at the end of this
// file performs them, under `AsyncBuild`'s lock and after it, in `AsyncMainLazy` and in
// `Tests/MainOnceTests/AsyncBuildMachineTests.swift`, which runs both over every state small
// configurations reach, against a scripted build and continuations.
//
// | Phase    | word      | build in flight | callers                          |
// | -------- | --------- | --------------- | -------------------------------- |
// | fresh    | 1         | no              | none                             |
// | awaited  | 1         | no              | waits that never build, in order |
// | building | 1         | yes             | any, in order                    |
// | built    | the value | no              | none                             |
//
// The transitions, every one the exhaustive test observes and no other (it compares this table
// with what it observes):
//
// | From     | Event                                                                                                             | To       |
// | -------- | ----------------------------------------------------------------------------------------------------------------- | -------- |
// | fresh    | a cancelled caller arrives; a cancelled waiter arrives; a caller is cancelled                                     | fresh    |
// | fresh    | a waiter arrives                                                                                                  | awaited  |
// | fresh    | a caller arrives                                                                                                  | building |
// | awaited  | a caller is cancelled                                                                                             | fresh    |
// | awaited  | a waiter arrives; a cancelled caller arrives; a cancelled waiter arrives; a caller is cancelled                   | awaited  |
// | awaited  | a caller arrives                                                                                                  | building |
// | building | a caller arrives; a waiter arrives; a cancelled caller arrives; a cancelled waiter arrives; a caller is cancelled | building |
// | building | the build throws                                                                                                  | fresh    |
// | building | the build throws                                                                                                  | awaited  |
// | building | the build succeeds                                                                                                | built    |
// | built    | a caller arrives; a waiter arrives; a cancelled caller arrives; a cancelled waiter arrives; a caller is cancelled | built    |
//
// A *caller* builds (`AsyncMainLazy.get()`); a *waiter* never does (`AsyncMainLazy.wait()`):
// *awaited* is a value whose callers are all waiters, with no build in flight.
//
// A build that throws answers every caller that waits for it with its error, but for the waits
// that never build (`AsyncMainLazy.wait()`), which go on waiting; the next caller that builds
// starts a new one. A build goes on when its callers leave: one that succeeds is kept.
// Safety, checked in every state: one build at a time, none after a success; at most one
// success; no caller answered twice, nor kept once answered; "built" told only after a success;
// a caller that arrives cancelled never joins; a waiter never starts a build nor hears of a
// failed one. Liveness:
// once nothing more can happen, every caller is answered, and every waiter too once a build
// succeeded or its task was cancelled.

/// The build in flight of an `AsyncMainLazy`, if any, and its callers. Plain data; every method
/// is called under `AsyncBuild.lock`, after the caller found the value unbuilt.
struct AsyncBuildMachine<Callers: CallerBatch> {
  typealias Caller = Callers.Element
  typealias Effects = AsyncBuildEffects<Callers>

  /// Whether a build is in flight.
  private(set) var isBuilding = false
  /// The callers waiting for the build in flight, in arrival order.
  private(set) var callers = Callers()

  /// What a caller that finds the value unbuilt does.
  enum Arrival {
    /// Its task was cancelled before it arrived: it never joins (the effects answer it).
    case cancelled
    /// It waits for the build in flight (the effects start it, if none was).
    case joins
  }

  /// A caller that finds the value unbuilt arrives; `bringsBuild` is `false` for a wait that
  /// never builds, which joins without starting one.
  mutating func arrive(
    _ caller: Caller, isCancelled: Bool, bringsBuild: Bool = true
  ) -> (Arrival, Effects) {
    if isCancelled {
      var effects = Effects(verdict: .cancelled)
      effects.answered.append(caller)
      return (.cancelled, effects)
    }
    callers.append(caller)
    guard bringsBuild else { return (.joins, Effects()) }
    defer { isBuilding = true }
    return (.joins, Effects(startsBuild: !isBuilding))
  }

  /// A caller's task was cancelled: it leaves the build if it waits for it, and is answered.
  /// `nil` if it does not wait: it has not arrived yet (or was answered already).
  mutating func cancel(where isCaller: (Caller) -> Bool) -> Effects? {
    var kept = Callers()
    var effects: Effects?
    while let caller = callers.removeFirst() {
      guard isCaller(caller), effects == nil else {
        kept.append(caller)
        continue
      }
      effects = Effects(verdict: .cancelled)
      effects?.answered.append(caller)
    }
    callers = kept
    return effects
  }

  /// The build in flight ended, with `value` if it succeeded: the callers to answer with its
  /// result, in arrival order. A success publishes the value and answers every caller; a
  /// failure only those that brought a build (`bringsBuild`), and the waits that never build
  /// go on waiting for the next.
  mutating func buildEnded(
    with value: UInt?, bringsBuild: (Caller) -> Bool = { _ in true }
  ) -> Effects {
    isBuilding = false
    var effects = Effects(verdict: value == nil ? .failed : .done, publishes: value)
    var kept = Callers()
    while let caller = callers.removeFirst() {
      let isAnswered = value != nil || bringsBuild(caller)
      if isAnswered { effects.answered.append(caller) }
      if !isAnswered { kept.append(caller) }
    }
    callers = kept
    return effects
  }
}

extension AsyncBuildMachine: Equatable where Callers: Equatable {}
extension AsyncBuildMachine: Hashable where Callers: Hashable {}

// MARK: - What a transition asks for, and the interpreter that does it
//
// | Effect                          | Where                  | Why there                                         |
// | ------------------------------- | ---------------------- | ------------------------------------------------- |
// | publish the value               | under the lock         | a releasing store after the build returned, before any caller is answered; a caller that arrives under the lock finds it, one on the fast path loads it acquiring |
// | let go of the builder           | after the lock         | after a success only: what it captured may run any deinit |
// | start the build                 | after the lock         | its task takes the lock first thing               |
// | resume each caller answered     | after the lock         | a resumed task must not find the lock held; nothing touches the caller after |

/// What one transition of an `AsyncMainLazy`'s builds asks for: decided by
/// ``AsyncBuildMachine``, performed by the interpreter below.
struct AsyncBuildEffects<Callers: CallerBatch> {
  /// The callers the transition answers, in order, each with ``verdict``.
  var answered = Callers()
  var verdict: Verdict?
  /// The error of the build that failed (`AsyncMainLazy`'s; a model has none).
  var failure: (any Error)?
  /// The value the build returned, to publish.
  var publishes: UInt?
  /// The caller that arrived starts the build in flight.
  var startsBuild = false

  /// Performs the effects that belong under the lock.
  func performUnderLock<Shell: AsyncBuildShell>(
    in shell: inout Shell, holding held: borrowing AsyncBuild.LockHeld
  ) where Shell.Callers == Callers {
    if let publishes { shell.publish(publishes, holding: held) }
  }

  /// Performs the rest, in the order of the table above, once the lock is released.
  consuming func performAfterLock<Shell: AsyncBuildShell>(in shell: inout Shell)
  where Shell.Callers == Callers {
    if publishes != nil { shell.letGoOfBuilder() }
    if startsBuild { shell.startBuild() }
    while let caller = answered.removeFirst() {
      shell.resume(caller, with: verdict!, failure: failure)
    }
  }
}

/// Where the effects of an `AsyncMainLazy`'s builds are performed: the lazy value, its build
/// and its callers' tasks (`AsyncMainLazy.swift`), or a model's.
protocol AsyncBuildShell {
  associatedtype Callers: CallerBatch

  /// Stores the built value's address in the word, with a releasing store, and takes the
  /// builder out, to let go of after the lock.
  mutating func publish(_ value: UInt, holding held: borrowing AsyncBuild.LockHeld)
  /// Lets go of the builder taken out by ``publish(_:holding:)``.
  mutating func letGoOfBuilder()
  /// Starts the build's task.
  mutating func startBuild()
  /// Resumes a caller's task with its answer.
  mutating func resume(_ caller: Callers.Element, with verdict: Verdict, failure: (any Error)?)
}
