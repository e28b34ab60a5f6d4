// MARK: - The state machine of an `AsyncMainLazy`
//
// Every decision an `AsyncMainLazy` makes about its builds: who starts one, who joins it, who
// leaves it, who is answered when it ends. Plain data and pure transitions, which
// `AsyncMainLazy` performs under `AsyncBuild.lock`, and which
// `Tests/MainOnceTests/AsyncBuildMachineTests.swift` runs over every state small configurations
// reach.
//
// | Phase    | word      | build in flight | callers         |
// | -------- | --------- | --------------- | --------------- |
// | fresh    | 1         | no              | none            |
// | building | 1         | yes             | any, in order   |
// | built    | the value | no              | none            |
//
// The transitions, every one the exhaustive test observes and no other (it compares this table
// with what it observes):
//
// | From     | Event                                                                 | To       |
// | -------- | --------------------------------------------------------------------- | -------- |
// | fresh    | a cancelled caller arrives; a caller is cancelled                     | fresh    |
// | fresh    | a caller arrives                                                      | building |
// | building | a caller arrives; a cancelled caller arrives; a caller is cancelled   | building |
// | building | the build throws                                                      | fresh    |
// | building | the build succeeds                                                    | built    |
// | built    | a caller arrives; a cancelled caller arrives; a caller is cancelled   | built    |
//
// A build that throws answers every caller that waits for it with its error, and the next
// caller starts a new one. A build goes on when its callers leave: one that succeeds is kept.
// Safety, checked in every state: one build at a time, none after a success; at most one
// success; no caller answered twice; "built" told only after a success; a caller that arrives
// cancelled never joins. Liveness: every caller is answered once nothing more can happen.

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

  mutating func arrive(_ caller: Caller, isCancelled: Bool) -> Arrival {
    if isCancelled { return .cancelled }
    callers.append(caller)
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

  /// The build in flight ended: its callers, to answer with its result, in arrival order.
  mutating func buildEnded() -> [Caller] {
    defer {
      callers = []
      isBuilding = false
    }
    return callers
  }
}

extension AsyncBuildMachine: Equatable where Caller: Equatable {}
extension AsyncBuildMachine: Hashable where Caller: Hashable {}
