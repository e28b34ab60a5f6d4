import Testing

@testable import MainOnce

/// `AsyncMainLazy`'s state machine, run over every state that up to four callers reach, with
/// builds that succeed or throw and cancellations at every point.
@Suite("AsyncMainLazy's state machine is safe and live in every reachable state")
struct AsyncBuildMachineTests {
  @Test(
    "one to four callers, every interleaving of arrivals, cancellations and builds",
    .enabled(if: !Sanitizers.areActive, "single-threaded and pure: a sanitizer adds only time"),
    arguments: 1...4)
  func everyInterleaving(callers: Int) async {
    let exploration = await offThePool { AsyncBuildModel.explore(callers: callers) }
    #expect(exploration.violations == [])
    #expect(exploration.states >= callers * 3)
  }

  @Test(
    "callers that build and waits that never do, mixed, every interleaving",
    .enabled(if: !Sanitizers.areActive, "single-threaded and pure: a sanitizer adds only time"),
    arguments: [(1, 1), (1, 2), (2, 1), (2, 2), (0, 2), (3, 1)])
  func waitsThatNeverBuild(callers: Int, waiters: Int) async {
    let exploration = await offThePool {
      AsyncBuildModel.explore(callers: callers, waiters: waiters)
    }
    #expect(exploration.violations == [], "\(callers) callers, \(waiters) waiters")
    #expect(exploration.states >= (callers + waiters) * 2)
  }

  @Test("the table in the source is the transitions the machine makes")
  func tableIsTheMachinesTransitions() async throws {
    let observed = await offThePool {
      AsyncBuildModel.explore(callers: 3).transitions
        .union(AsyncBuildModel.explore(callers: 2, waiters: 2).transitions)
    }
    let source = try packageFile("Sources/MainOnce/Engine/AsyncBuildMachine.swift")
    let inSource = Model.Transition.rows(in: source, linePrefix: "// ")
    #expect(inSource == observed, "missing: \(observed.subtracting(inSource))")
  }
}

/// An `AsyncMainLazy` and its callers: tasks, each of which may be cancelled at any point. Each
/// transition runs the machine and `AsyncMainLazy`'s own interpreter of its effects
/// (`AsyncBuildEffects`), with the model as the world they are performed in: a scripted word,
/// build and continuations.
enum AsyncBuildModel {
  struct World: Hashable {
    var machine = AsyncBuildMachine<PackedQueue>()
    var isBuilt = false
    var arrived = Packed<Bool>()
    var cancelled = Packed<Bool>()
    var answers = Packed<Verdict?>()
    var successes = 0
    var buildsStarted = 0
  }

  /// Explores `callers` that build and, after them, `waiters` that never do.
  static func explore(callers builders: Int, waiters: Int = 0) -> Exploration {
    let callers = builders + waiters
    return MainOnceTests.explore(
      from: World(), limit: 100_000,
      successors: { world in
        var next: [Step] = []
        // Callers of a kind are alike until they arrive: they arrive in their order.
        for kind in [true, false] {
          if let caller = (0..<callers).first(where: {
            ($0 < builders) == kind && !world.arrived[$0]
          }) {
            next.append(Step(world, builders: builders).arrive(caller))
          }
        }
        for caller in 0..<callers where world.answers[caller] == nil && !world.cancelled[caller] {
          next.append(Step(world, builders: builders).cancel(caller))
        }
        if world.machine.isBuilding {
          next.append(Step(world, builders: builders).buildEnds(succeeds: true))
          next.append(Step(world, builders: builders).buildEnds(succeeds: false))
        }
        return next.map { step in
          var violations = step.violations
          // A caller that was answered has left: only callers still waiting are in the machine.
          if step.world.machine.callers.contains(where: { step.world.answers[$0] != nil }) {
            violations.append("a caller that was answered still waits for a build")
          }
          return Successor(
            event: step.event, state: step.world,
            violations: violations.map { "\(callers) callers, \(step.event): \($0)" })
        }
      },
      phase: phase(of:),
      // A wait that never builds may wait for ever when no build succeeds and its task is not
      // cancelled. Every other caller is answered.
      unanswered: { world in
        (0..<callers).filter { caller in
          world.answers[caller] == nil
            && (caller < builders || world.isBuilt || world.cancelled[caller])
        }
        .map { "caller \($0) is never answered" }
      })
  }

  static func phase(of world: World) -> String {
    if world.isBuilt { return "built" }
    if world.machine.isBuilding { return "building" }
    return world.machine.callers.first(where: { _ in true }) == nil ? "fresh" : "awaited"
  }

  /// One event, as `AsyncMainLazy` performs it under its lock and after it, with every check.
  struct Step: AsyncBuildShell {
    typealias Callers = PackedQueue

    var world: World
    /// Callers below this number bring a build; the others are waits that never build.
    let builders: Int
    var event = ""
    var violations: [String] = []

    init(_ world: World, builders: Int) {
      self.world = world
      self.builders = builders
    }

    func bringsBuild(_ caller: Int) -> Bool { caller < builders }

    mutating func answer(_ caller: Int, _ verdict: Verdict) {
      if world.answers[caller] != nil { violations.append("caller \(caller) is answered twice") }
      if verdict == .done, !world.isBuilt { violations.append("caller \(caller) told built") }
      world.answers[caller] = verdict
    }

    /// Performs `effects` with `AsyncMainLazy`'s interpreter: the first half under the lock.
    mutating func perform(_ effects: AsyncBuildEffects<PackedQueue>) {
      AsyncBuild.withLock { held in effects.performUnderLock(in: &self, holding: held) }
      effects.performAfterLock(in: &self)
    }

    func arrive(_ caller: Int) -> Step {
      var step = self
      step.world.arrived[caller] = true
      let bringsBuild = bringsBuild(caller)
      let who = bringsBuild ? "caller" : "waiter"
      step.event = step.world.cancelled[caller] ? "a cancelled \(who) arrives" : "a \(who) arrives"
      guard !step.world.isBuilt else {
        step.answer(caller, .done)
        return step
      }
      let (wasBuilding, started) = (step.world.machine.isBuilding, step.world.buildsStarted)
      let (arrival, effects) = step.world.machine.arrive(
        caller, isCancelled: step.world.cancelled[caller], bringsBuild: bringsBuild)
      step.perform(effects)
      let startsBuild = step.world.buildsStarted > started
      switch arrival {
      case .cancelled:
        if !step.world.cancelled[caller] { step.violations.append("told cancelled, but was not") }
        if step.world.answers[caller] != .cancelled {
          step.violations.append("a cancelled caller was not answered")
        }
      case .joins:
        if step.world.cancelled[caller] { step.violations.append("joined though cancelled") }
        if bringsBuild, startsBuild == wasBuilding {
          step.violations.append("a second build, or none")
        }
        if !bringsBuild, startsBuild { step.violations.append("a waiter started a build") }
      }
      return step
    }

    func cancel(_ caller: Int) -> Step {
      var step = self
      step.event = "a caller is cancelled"
      step.world.cancelled[caller] = true
      // The cancellation handler: a caller that has not joined is told at its arrival; one
      // that waits is answered now.
      let waits = step.world.arrived[caller] && step.world.answers[caller] == nil
      if step.world.arrived[caller],
        let effects = step.world.machine.cancel(where: { $0 == caller })
      {
        step.perform(effects)
      }
      if waits, step.world.answers[caller] != .cancelled {
        step.violations.append("caller \(caller) waits on, though its task was cancelled")
      }
      return step
    }

    func buildEnds(succeeds: Bool) -> Step {
      var step = self
      step.event = succeeds ? "the build succeeds" : "the build throws"
      if succeeds {
        step.world.successes += 1
        if step.world.successes > 1 { step.violations.append("two builds succeeded") }
      }
      let effects = step.world.machine.buildEnded(with: succeeds ? 2 : nil) { $0 < builders }
      step.perform(effects)
      if succeeds, !step.world.isBuilt { step.violations.append("a success was not published") }
      if step.world.machine.isBuilding { step.violations.append("a build is left in flight") }
      return step
    }

    // MARK: The world the effects are performed in

    mutating func publish(_ value: UInt, holding _: borrowing AsyncBuild.LockHeld) {
      if world.isBuilt { violations.append("the value was published twice") }
      world.isBuilt = true
    }

    mutating func letGoOfBuilder() {
      if !world.isBuilt { violations.append("the builder was let go before a success") }
    }

    mutating func startBuild() { world.buildsStarted += 1 }

    mutating func resume(_ caller: Int, with verdict: Verdict, failure: (any Error)?) {
      if verdict == .failed, !bringsBuild(caller) {
        violations.append("waiter \(caller) was told of a failed build")
      }
      answer(caller, verdict)
    }
  }
}
