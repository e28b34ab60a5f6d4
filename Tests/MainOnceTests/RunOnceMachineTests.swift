import Foundation
import Testing

@testable import MainOnce

/// `runOnce(for:)`'s state machine, run over every state that up to five callers reach, each on
/// a thread of its own, with bodies that return or throw.
@Suite("runOnce(for:)'s state machine is safe and live in every reachable state")
struct RunOnceMachineTests {
  @Test("one to five callers, every interleaving of arrivals, returns and throws", arguments: 1...5)
  func everyInterleaving(callers: Int) async {
    let exploration = await offThePool { RunOnceModel.explore(callers: callers) }
    #expect(exploration.violations == [])
    #expect(exploration.states >= callers * 2)
  }

  @Test("the table in the source is the transitions the machine makes")
  func tableIsTheMachinesTransitions() async throws {
    let observed = await offThePool { RunOnceModel.explore(callers: 3).transitions }
    let source = try packageFile("Sources/MainOnce/PerObject/RunOnceMachine.swift")
    let inSource = Model.Transition.rows(in: source, linePrefix: "// ")
    #expect(inSource == observed, "missing: \(observed.subtracting(inSource))")
  }
}

/// A `runOnce(for:)` call site and its callers, caller `n` on thread `n + 1`. Each transition
/// runs the machine and the cell's own interpreter of its effects (`RunOnceEffects`), with the
/// model as the world they are performed in: a scripted parker and word.
enum RunOnceModel {
  struct World: Hashable {
    var machine: RunOnceMachine<PackedQueue, Int>?
    var isDone = false
    /// The caller whose body runs.
    var running: Int?
    /// The caller told that its body runs next, until it wakes.
    var handedTo: Int?
    var arrived = Packed<Bool>()
    /// Whether a caller is parked: from its arrival at a running call site until its wake.
    var parked = Packed<Bool>()
    var answers = Packed<Verdict?>()
    var successes = 0
  }

  static func explore(callers: Int) -> Exploration {
    MainOnceTests.explore(
      from: World(), limit: 100_000,
      successors: { world in
        var next: [Step] = []
        // Callers are alike until they arrive: they arrive in their order.
        if let caller = (0..<callers).first(where: { !world.arrived[$0] }) {
          next.append(Step(world).arrive(caller))
        }
        if world.running != nil {
          next.append(Step(world).bodyEnds(returns: true))
          next.append(Step(world).bodyEnds(returns: false))
        }
        return next.map { step in
          Successor(
            event: step.event, state: step.world,
            violations: step.violations.map { "\(callers) callers, \(step.event): \($0)" })
        }
      },
      phase: phase(of:),
      unanswered: { world in
        (0..<callers).compactMap { caller in
          if world.parked[caller] { return "caller \(caller) is never woken" }
          return world.answers[caller] == nil ? "caller \(caller) is never answered" : nil
        }
      })
  }

  static func phase(of world: World) -> String {
    world.isDone ? "done" : world.machine == nil ? "fresh" : "running"
  }

  /// One event, as `RunOnceCell.run` performs it, with every check.
  struct Step: RunOnceShell {
    typealias Callers = PackedQueue

    var world: World
    var event = ""
    var violations: [String] = []

    init(_ world: World) { self.world = world }

    /// What `RunOnceCell.run` does under its lock for a caller that arrives.
    func arrive(_ caller: Int) -> Step {
      var step = self
      step.event = "a caller arrives"
      step.world.arrived[caller] = true
      if step.world.isDone {
        step.answer(caller, .done)
      } else if var machine = step.world.machine {
        // A call from inside the running body, on the runner's thread, is re-entrant.
        var copy = machine
        if case .wait = copy.arrive(-1, on: machine.runner) {
          step.violations.append("a call from inside the body was told to wait")
        }
        switch machine.arrive(caller, on: caller + 1) {
        case .reentrant:
          step.violations.append("a caller on another thread was taken for a re-entrant one")
        case .wait: step.world.parked[caller] = true
        }
        step.world.machine = machine
      } else {
        step.world.machine = RunOnceMachine(runner: caller + 1)
        step.world.running = caller
      }
      return step
    }

    /// What `RunOnceCell.run` does when the running body returns or throws: the runner is
    /// answered by its own body, and the run's transition is performed by the cell's
    /// interpreter, under the lock and after it.
    func bodyEnds(returns: Bool) -> Step {
      var step = self
      step.event = returns ? "the body returns" : "the body throws"
      let runner = step.world.running!
      step.world.running = nil
      if returns {
        step.world.successes += 1
        if step.world.successes > 1 { step.violations.append("two bodies returned") }
      }
      var machine = step.world.machine!
      // Callers arrive in their order, so the one that has waited longest is the first waiting.
      let longest = (0..<16).first { step.world.parked[$0] }
      let effects = returns ? machine.bodyReturned() : machine.bodyThrew(threadOf: { $0 + 1 })
      step.world.machine = machine
      if !returns, let next = effects.answered.first(where: { _ in true }) {
        if next != longest { step.violations.append("caller \(next) ran before \(longest!)") }
        if machine.runner != next + 1 { step.violations.append("the turn went to another thread") }
      }
      RunOnceCell.withLock { held in effects.performUnderLock(in: &step, holding: held) }
      effects.performAfterLock(in: &step)
      step.answer(runner, returns ? .done : .failed)
      return step
    }

    mutating func answer(_ caller: Int, _ verdict: Verdict) {
      if world.answers[caller] != nil { violations.append("caller \(caller) is answered twice") }
      if verdict == .done, !world.isDone {
        violations.append("caller \(caller) was told done before the call site was")
      }
      world.answers[caller] = verdict
    }

    // MARK: The world the effects are performed in

    mutating func publish(holding _: borrowing RunOnceCell.LockHeld) {
      if world.isDone { violations.append("the call site was published twice") }
      world.isDone = true
    }

    mutating func record(
      _ turn: RunOnceTurn, of caller: Int, holding _: borrowing RunOnceCell.LockHeld
    ) {
      if !world.parked[caller] { violations.append("caller \(caller) was answered, not waiting") }
      switch turn {
      case .done: answer(caller, .done)
      case .yours:
        if world.handedTo != nil { violations.append("two callers were given the turn") }
        world.handedTo = caller
      }
    }

    mutating func endRun(holding _: borrowing RunOnceCell.LockHeld) {
      world.machine = nil
    }

    /// A parked caller wakes: with its answer, or to run its own body.
    mutating func unpark(_ caller: Int) {
      if !world.parked[caller] { violations.append("caller \(caller) was woken, not parked") }
      world.parked[caller] = false
      if world.handedTo == caller {
        world.handedTo = nil
        if world.running != nil { violations.append("two bodies run at once") }
        world.running = caller
      } else if world.answers[caller] == nil {
        violations.append("caller \(caller) was woken before it was answered")
      }
    }
  }
}
