import Foundation
import Testing

@testable import MainOnce

/// `runOnce(for:)`'s state machine, run over every state that up to five callers reach, each on
/// a thread of its own, with bodies that return or throw.
@Suite("runOnce(for:)'s state machine is safe and live in every reachable state")
struct RunOnceMachineTests {
  @Test("one to five callers, every interleaving of arrivals, returns and throws", arguments: 1...5)
  func everyInterleaving(callers: Int) {
    let exploration = RunOnceModel.explore(callers: callers)
    #expect(exploration.violations == [])
    #expect(exploration.states >= callers * 2)
  }

  @Test("the table in the source is the transitions the machine makes")
  func tableIsTheMachinesTransitions() throws {
    let observed = RunOnceModel.explore(callers: 3).transitions
    let source = try packageFile("Sources/MainOnce/PerObject/RunOnceMachine.swift")
    let inSource = Model.Transition.rows(in: source, linePrefix: "// ")
    #expect(inSource == observed, "missing: \(observed.subtracting(inSource))")
  }
}

/// A `runOnce(for:)` call site and its callers, caller `n` on thread `n + 1`.
enum RunOnceModel {
  struct World: Hashable {
    var machine: RunOnceMachine<Int, Int>?
    var isDone = false
    /// The caller whose body runs.
    var running: Int?
    var arrived = Packed<Bool>()
    var answers = Packed<Verdict?>()
    var successes = 0
  }

  static func explore(callers: Int) -> Exploration {
    MainOnceTests.explore(
      from: World(), limit: 100_000,
      successors: { world in
        var next: [(String, World, [String])] = []
        // Callers are alike until they arrive: they arrive in their order.
        if let caller = (0..<callers).first(where: { !world.arrived[$0] }) {
          next.append(arrive(caller, in: world))
        }
        if world.running != nil {
          next.append(bodyEnds(in: world, returns: true))
          next.append(bodyEnds(in: world, returns: false))
        }
        return next.map { event, after, violations in
          Successor(
            event: event, state: after,
            violations: violations.map { "\(callers) callers, \(event): \($0)" })
        }
      },
      phase: phase(of:),
      unanswered: { world in
        (0..<callers).filter { world.answers[$0] == nil }.map { "caller \($0) is never answered" }
      })
  }

  static func phase(of world: World) -> String {
    world.isDone ? "done" : world.machine == nil ? "fresh" : "running"
  }

  /// What `RunOnceCell.run` does under its lock for a caller that arrives.
  static func arrive(_ caller: Int, in world: World) -> (String, World, [String]) {
    var world = world
    var violations: [String] = []
    world.arrived[caller] = true
    if world.isDone {
      world.answers[caller] = .done
    } else if var machine = world.machine {
      // A call from inside the running body, on the runner's thread, is re-entrant.
      var copy = machine
      if case .wait = copy.arrive(-1, on: machine.runner) {
        violations.append("a call from inside the body was told to wait")
      }
      if case .reentrant = machine.arrive(caller, on: caller + 1) {
        violations.append("a caller on another thread was taken for a re-entrant one")
      }
      world.machine = machine
    } else {
      world.machine = RunOnceMachine(runner: caller + 1)
      world.running = caller
    }
    return ("a caller arrives", world, violations)
  }

  /// What `RunOnceCell.run` does under its lock when the running body returns or throws.
  static func bodyEnds(in world: World, returns: Bool) -> (String, World, [String]) {
    var world = world
    var violations: [String] = []
    let runner = world.running!
    func answer(_ caller: Int, _ verdict: Verdict) {
      if world.answers[caller] != nil { violations.append("caller \(caller) is answered twice") }
      world.answers[caller] = verdict
    }
    if returns {
      world.successes += 1
      if world.successes > 1 { violations.append("two bodies returned") }
      answer(runner, .done)
      for caller in world.machine!.bodyReturned() { answer(caller, .done) }
      world.isDone = true
      world.machine = nil
      world.running = nil
      return ("the body returns", world, violations)
    }
    answer(runner, .failed)
    // Callers arrive in their order, so the one that has waited longest is the first waiting.
    let longest = (0..<16).first { $0 != runner && world.arrived[$0] && world.answers[$0] == nil }
    if let next = world.machine!.bodyThrew(threadOf: { $0 + 1 }) {
      if next != longest { violations.append("caller \(next) ran before \(longest!)") }
      if world.machine!.runner != next + 1 { violations.append("the turn went to another thread") }
      world.running = next
    } else {
      world.machine = nil
      world.running = nil
    }
    return ("the body throws", world, violations)
  }
}
