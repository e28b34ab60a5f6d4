// MARK: - The state machine of an `AsyncMainLazy`
//
// Every decision an `AsyncMainLazy` makes about its builds: who starts one, who joins it, who
// leaves it, who is answered when it ends. Plain data and pure transitions, which
// `AsyncMainLazy` performs under `AsyncBuild.lock`, and which
// `Tests/MainOnceTests/AsyncBuildMachineTests.swift` runs over every state small configurations
// reach.
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
struct AsyncBuildMachine<Caller> {
  /// Whether a build is in flight.
  private(set) var isBuilding = false
  /// The callers waiting for the build in flight, in arrival order.
  private(set) var callers: [Caller] = []

  /// What a caller that finds the value unbuilt does.
  enum Arrival {
    /// Its task was cancelled before it arrived: it never joins.
    case cancelled
    /// It waits for the build in flight, which it starts if `startsBuild`.
    case joins(startsBuild: Bool)
  }

  /// A caller that finds the value unbuilt arrives; `bringsBuild` is `false` for a wait that
  /// never builds, which joins without starting one.
  mutating func arrive(_ caller: Caller, isCancelled: Bool, bringsBuild: Bool = true) -> Arrival {
    if isCancelled { return .cancelled }
    callers.append(caller)
    guard bringsBuild else { return .joins(startsBuild: false) }
    defer { isBuilding = true }
    return .joins(startsBuild: !isBuilding)
  }

  /// A caller's task was cancelled: it leaves the build if it waits for it. Returns whether it
  /// did; if not, it has not arrived yet (or was answered already).
  mutating func cancel(where isCaller: (Caller) -> Bool) -> Bool {
    guard let index = callers.firstIndex(where: isCaller) else { return false }
    callers.remove(at: index)
    return true
  }

  /// The build in flight ended: the callers to answer with its result, in arrival order. A
  /// success answers every caller; a failure only those that brought a build (`bringsBuild`),
  /// and the waits that never build go on waiting for the next.
  mutating func buildEnded(
    succeeded: Bool, bringsBuild: (Caller) -> Bool = { _ in true }
  ) -> [Caller] {
    isBuilding = false
    guard !succeeded else {
      defer { callers = [] }
      return callers
    }
    let answered = callers.filter(bringsBuild)
    callers.removeAll(where: bringsBuild)
    return answered
  }
}

extension AsyncBuildMachine: Equatable where Caller: Equatable {}
extension AsyncBuildMachine: Hashable where Caller: Hashable {}
