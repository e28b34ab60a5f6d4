import Foundation

/// What an exhaustive exploration of a state machine found: how many states it reached, the
/// promises broken on the way, and the transitions it made, as the tables name them.
struct Exploration: Sendable {
  /// Whether the explorations too long for every `swift test` run at their full size
  /// (`MAINONCE_FULL_EXPLORATION=1`, as `.ci/run` sets it in a step of its own). Without it,
  /// smaller configurations stand in for them, chosen so that they catch every mutation of the
  /// machines in `Scripts/mutations` that the full ones catch (`Scripts/mutations.sh` checks it).
  static let isFull = ProcessInfo.processInfo.environment["MAINONCE_FULL_EXPLORATION"] == "1"

  var states = 0
  var violations: [String] = []
  var transitions = Set<Model.Transition>()
}

/// One event applied to a state: its name in the table, the state after it, and the promises
/// it broke.
struct Successor<State> {
  let event: String
  let state: State
  let violations: [String]
}

/// Explores every state reachable from `start`, depth first, each once. `successors` gives
/// the states one event away; `phase` names a state as the tables do; `unanswered` says what is
/// wrong with a state from which nothing more can happen (callers left waiting). Stops after
/// `limit` states, so that a machine broken into an endless one fails instead of hanging, and
/// after a few findings, which are enough to see what broke.
func explore<State: Hashable>(
  from start: State, limit: Int,
  successors: (State) -> [Successor<State>],
  phase: (State) -> String,
  unanswered: (State) -> [String]
) -> Exploration {
  var exploration = Exploration()
  var seen: Set<State> = [start]
  var frontier = [start]
  while let state = frontier.popLast() {
    exploration.states += 1
    guard exploration.states <= limit else {
      exploration.violations.append("more than \(limit) states: the machine does not settle")
      break
    }
    let next = successors(state)
    for successor in next {
      exploration.violations += successor.violations
      exploration.transitions.insert(
        Model.Transition(
          from: phase(state), event: successor.event, to: phase(successor.state)))
      if seen.insert(successor.state).inserted { frontier.append(successor.state) }
    }
    if next.isEmpty { exploration.violations += unanswered(state) }
    if exploration.violations.count > 10 { break }
  }
  return exploration
}
