import Testing

@testable import MainOnce

/// `AsyncMainLazy`'s state machine, run over every state that up to four callers reach, with
/// builds that succeed or throw and cancellations at every point.
@Suite("AsyncMainLazy's state machine is safe and live in every reachable state")
struct AsyncBuildMachineTests {
  @Test(
    "one to four callers, every interleaving of arrivals, cancellations and builds",
    arguments: 1...4)
  func everyInterleaving(callers: Int) {
    let exploration = AsyncBuildModel.explore(callers: callers)
    #expect(exploration.violations == [])
    #expect(exploration.states >= callers * 3)
  }

  @Test("the table in the source is the transitions the machine makes")
  func tableIsTheMachinesTransitions() throws {
    let observed = AsyncBuildModel.explore(callers: 3).transitions
    let source = try packageFile("Sources/MainOnce/Internal/AsyncBuildMachine.swift")
    let inSource = Model.Transition.rows(in: source, linePrefix: "// ")
    #expect(inSource == observed, "missing: \(observed.subtracting(inSource))")
  }
}

/// An `AsyncMainLazy` and its callers: tasks, each of which may be cancelled at any point.
enum AsyncBuildModel {
  struct World: Hashable {
    var machine = AsyncBuildMachine<Int>()
    var isBuilt = false
    var arrived = Packed<Bool>()
    var cancelled = Packed<Bool>()
    var answers = Packed<Verdict?>()
    var successes = 0
    var buildsStarted = 0
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
        for caller in 0..<callers where world.answers[caller] == nil && !world.cancelled[caller] {
          next.append(Step(world).cancel(caller))
        }
        if world.machine.isBuilding {
          next.append(Step(world).buildEnds(succeeds: true))
          next.append(Step(world).buildEnds(succeeds: false))
        }
        return next.map { step in
          Successor(
            event: step.event, state: step.world,
            violations: step.violations.map { "\(callers) callers, \(step.event): \($0)" })
        }
      },
      phase: phase(of:),
      unanswered: { world in
        (0..<callers).filter { world.answers[$0] == nil }.map { "caller \($0) is never answered" }
      })
  }

  static func phase(of world: World) -> String {
    world.isBuilt ? "built" : world.machine.isBuilding ? "building" : "fresh"
  }

  /// One event, as `AsyncMainLazy` performs it under its lock, with every check.
  struct Step {
    var world: World
    var event = ""
    var violations: [String] = []

    init(_ world: World) { self.world = world }

    mutating func answer(_ caller: Int, _ verdict: Verdict) {
      if world.answers[caller] != nil { violations.append("caller \(caller) is answered twice") }
      if verdict == .done, !world.isBuilt { violations.append("caller \(caller) told built") }
      world.answers[caller] = verdict
    }

    func arrive(_ caller: Int) -> Step {
      var step = self
      step.world.arrived[caller] = true
      step.event = step.world.cancelled[caller] ? "a cancelled caller arrives" : "a caller arrives"
      guard !step.world.isBuilt else {
        step.answer(caller, .done)
        return step
      }
      let wasBuilding = step.world.machine.isBuilding
      switch step.world.machine.arrive(caller, isCancelled: step.world.cancelled[caller]) {
      case .cancelled:
        if !step.world.cancelled[caller] { step.violations.append("told cancelled, but was not") }
        step.answer(caller, .cancelled)
      case .joins(let startsBuild):
        if step.world.cancelled[caller] { step.violations.append("joined though cancelled") }
        if startsBuild == wasBuilding { step.violations.append("a second build, or none") }
        if startsBuild { step.world.buildsStarted += 1 }
      }
      return step
    }

    func cancel(_ caller: Int) -> Step {
      var step = self
      step.event = "a caller is cancelled"
      step.world.cancelled[caller] = true
      // The cancellation handler: a caller that has not joined is told at its arrival.
      if step.world.arrived[caller], step.world.machine.cancel(where: { $0 == caller }) {
        step.answer(caller, .cancelled)
      }
      return step
    }

    func buildEnds(succeeds: Bool) -> Step {
      var step = self
      step.event = succeeds ? "the build succeeds" : "the build throws"
      if succeeds {
        step.world.successes += 1
        step.world.isBuilt = true
        if step.world.successes > 1 { step.violations.append("two builds succeeded") }
      }
      for caller in step.world.machine.buildEnded() {
        step.answer(caller, succeeds ? .done : .failed)
      }
      if step.world.machine.isBuilding { step.violations.append("a build is left in flight") }
      return step
    }
  }
}
