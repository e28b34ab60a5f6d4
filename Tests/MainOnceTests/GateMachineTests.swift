import Foundation
import Testing

@testable import MainOnce

/// The engine's state machine, run over every state that small configurations of callers can
/// reach: the spirit of Rust's `loom` or a TLA+ model, with the engine's own transition code.
@Suite("The once-cell's state machine is safe and live in every reachable state")
struct GateMachineTests {
  @Test(
    "every mix of up to three callers, with hops, throws, cancellations and a freed token",
    .enabled(if: !Sanitizers.areActive, "single-threaded and pure: a sanitizer adds only time"),
    arguments: Model.Form.mixes(upTo: 3))
  func everyMixOfUpToThreeCallers(forms: [Model.Form]) async {
    let exploration = await offThePool { Model.explore(forms) }
    #expect(exploration.violations == [], "\(forms)")
    // Waiters alone reach few states: nothing ever runs.
    #expect(exploration.states > (forms.contains(where: \.bringsAttempt) ? forms.count : 1))
  }

  @Test(
    "two callers of each form, and three of each of any three forms, interleaved every way",
    .serialized,
    .enabled(if: Exploration.isFull, "minutes long: MAINONCE_FULL_EXPLORATION=1 runs it"),
    .enabled(if: !Sanitizers.areActive, "single-threaded and pure: a sanitizer adds only time"),
    arguments: Model.Form.largerConfigurations)
  func largerConfigurations(forms: [Model.Form]) async {
    // Seconds of work each, one at a time, off the cooperative pool that the rest of the suite
    // runs on (the smaller ones too).
    let exploration = await offThePool { Model.explore(forms) }
    #expect(exploration.violations == [])
    #expect(exploration.states > 10_000)
  }

  /// The configurations above, smaller, for every `swift test` (a few seconds): they catch every
  /// mutation of the machine in `Scripts/mutations` that the larger ones catch.
  @Test(
    "one caller of each form with each kind of wait, and two of each of any three forms, interleaved every way",
    .serialized,
    .enabled(if: !Exploration.isFull, "MAINONCE_FULL_EXPLORATION=1 runs the larger ones instead"),
    .enabled(if: !Sanitizers.areActive, "single-threaded and pure: a sanitizer adds only time"),
    arguments: Model.Form.smallerConfigurations)
  func smallerConfigurations(forms: [Model.Form]) async {
    let exploration = await offThePool { Model.explore(forms) }
    #expect(exploration.violations == [])
    #expect(exploration.states > 1_000)
  }

  @Test(
    "the table in the source and in the documentation is the transitions the machine makes",
    .enabled(if: !Sanitizers.areActive, "single-threaded and pure: a sanitizer adds only time"))
  func tablesAreTheMachinesTransitions() async throws {
    let observed = await offThePool {
      Model.Form.mixes(upTo: 3).reduce(into: Set<Model.Transition>()) {
        $0.formUnion(Model.explore($1).transitions)
      }
    }
    let machine = try packageFile("Sources/MainOnce/Engine/GateMachine.swift")
    let article = try packageFile("Sources/MainOnce/MainOnce.docc/HowATokenMoves.md")
    let inSource = Model.Transition.rows(in: machine, linePrefix: "// ")
    let inArticle = Model.Transition.rows(in: article, linePrefix: "")
    #expect(inSource == observed, "missing: \(observed.subtracting(inSource))")
    #expect(inArticle == observed, "missing: \(observed.subtracting(inArticle))")
  }

  @Test("a broken machine is caught: a hop that is never sent leaves callers without a runner")
  func explorationCatchesALostHop() async {
    let exploration = await offThePool {
      Model.explore([.workerBlocking, .workerBlocking], losesHops: true)
    }
    #expect(exploration.violations.contains { $0.contains("never resolved") })
  }

  @Test("a broken world is caught: a waiting main thread that serves nothing strands callers")
  func explorationCatchesAMainWaitThatDoesNotServe() async {
    let exploration = await offThePool {
      Model.explore([.mainWaiting, .workerBlocking], servesNothing: true)
    }
    #expect(exploration.violations.contains { $0.contains("never resolved") })
  }

  @Test("a broken engine is caught: a serving wait woken only by the hops sent strands a caller")
  func explorationCatchesAServingWaitWokenOnlyByHops() async {
    // A thrown attempt, run by the wait, leaves its hop on its way: the next attempt sends none.
    let exploration = await offThePool {
      Model.explore([.mainWaiting, .workerBlocking, .workerBlocking], wakesOnlyForHops: true)
    }
    #expect(exploration.violations.contains { $0.contains("never resolved") })
  }
}

/// Reads a file of the package, by its path from the package's root.
func packageFile(_ path: String) throws -> String {
  let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent()
  return try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
}

/// A model of one once-cell and its world: callers of each form, the main thread, the hops on
/// the main queue and the token's storage. Its transitions call ``GateMachine``'s, as the
/// engine does, and check every promise of the machine after each.
enum Model {
  /// How a caller calls.
  enum Form: Hashable, CaseIterable, CustomStringConvertible, Sendable {
    /// A blocking call in main context: it runs the queue itself.
    case mainBlocking
    /// A blocking call on a worker thread: it parks.
    case workerBlocking
    /// An `await` call: it suspends, and may be cancelled.
    case task
    /// A completion-form call: it leaves a handler and returns.
    case handler
    /// A blocking wait that never initializes, in main context: it drives the attempts queued
    /// already, then serves those queued while it waits.
    case mainWaiting
    /// A blocking wait that never initializes, on a worker thread: it parks.
    case workerWaiting
    /// An `await` wait that never initializes: it suspends, and may be cancelled.
    case taskWaiting
    /// A completion-form wait that never initializes: it leaves a handler and returns.
    case handlerWaiting

    var description: String {
      switch self {
      case .mainBlocking: "main"
      case .workerBlocking: "worker"
      case .task: "task"
      case .handler: "handler"
      case .mainWaiting: "main waiter"
      case .workerWaiting: "worker waiter"
      case .taskWaiting: "task waiter"
      case .handlerWaiting: "handler waiter"
      }
    }

    /// The forms that bring an attempt.
    static let initializing: [Form] = [.mainBlocking, .workerBlocking, .task, .handler]

    var borrowsStorage: Bool { self != .handler && self != .handlerWaiting }
    var bringsAttempt: Bool { Self.initializing.contains(self) }
    var isInMainContext: Bool { self == .mainBlocking || self == .mainWaiting }
    var isTask: Bool { self == .task || self == .taskWaiting }

    /// Every multiset of forms with one to `count` callers.
    /// Two callers of each form; three of each of any three forms; two more. Built in steps,
    /// with every type written out: as one expression in the test's arguments, the type
    /// checkers of Swift 6.0 and 6.2 gave up on it.
    static var largerConfigurations: [[Form]] {
      var configurations: [[Form]] = [initializing + initializing]
      for left in initializing {
        let forms: [Form] = initializing.filter { $0 != left }
        configurations.append(forms + forms + forms)
      }
      let waiting: [Form] = [.mainWaiting, .workerWaiting, .taskWaiting, .handlerWaiting]
      configurations.append(initializing + waiting)
      configurations.append([
        .mainBlocking, .mainBlocking, .workerBlocking, .task, .task, .mainWaiting, .taskWaiting,
      ])
      return configurations
    }

    /// One caller of each form with each kind of wait; two of each of any three forms. Built
    /// step by step, as `largerConfigurations` is: in a test's arguments, closures make Swift
    /// 6.0's type checker crash.
    static var smallerConfigurations: [[Form]] {
      var configurations: [[Form]] = []
      for waiting: Form in [.mainWaiting, .workerWaiting, .taskWaiting, .handlerWaiting] {
        configurations.append(initializing + [waiting])
      }
      for left in initializing {
        let forms: [Form] = initializing.filter { $0 != left }
        configurations.append(forms + forms)
      }
      return configurations
    }

    static func mixes(upTo count: Int) -> [[Form]] {
      guard count > 0 else { return [] }
      let shorter = mixes(upTo: count - 1)
      let longest = ([[]] + shorter).filter { $0.count == count - 1 }.flatMap { mix in
        let from = mix.last.map { allCases.firstIndex(of: $0)! } ?? 0
        return allCases[from...].map { mix + [$0] }
      }
      return shorter + longest
    }
  }

  /// The callers as the machine sees them: plain values packed in words, so that a state can be
  /// copied, compared and hashed fast.
  struct Callers: GateCallers, Hashable {
    typealias Caller = Int
    typealias Thread = Int
    typealias Batch = PackedQueue

    var phases = Packed<CallerPhase>()
    let borrows: Packed<Bool>
    var order = PackedQueue()

    var isEmpty: Bool { order.count == 0 }
    func phase(of caller: Int) -> CallerPhase { phases[caller] }
    mutating func setPhase(_ phase: CallerPhase, of caller: Int) { phases[caller] = phase }
    func borrowsStorage(_ caller: Int) -> Bool { borrows[caller] }
    mutating func append(_ caller: Int) { order.append(caller) }
    mutating func remove(_ caller: Int) { order.remove(caller) }
    func first(where predicate: (Int) -> Bool) -> Int? { order.first(where: predicate) }
    mutating func removeFirst() -> Int? { order.removeFirst() }
  }

  /// The thread that holds the main queue, in the model. Callers' own threads are 1, 2, …
  static let mainThread = 0

  /// What the main thread does.
  enum Main: Hashable {
    case idle
    /// It runs an attempt: for a main-context caller's drive (`caller`), or a hop's (`nil`).
    case inAttempt(driver: Int?)
    /// It is blocked in a main-context wait (`caller`) that serves the main queue: hops cannot
    /// run, and the wait runs the attempts queued meanwhile.
    case waiting(Int)
  }

  /// The word of the token's storage.
  enum Word: Hashable {
    case fresh
    /// A main-context caller runs its attempt in place, with no gate.
    case inPlace
    case attached
    case published
  }

  struct World: Hashable {
    var gate: GateMachine<Callers>?
    var word = Word.fresh
    var storageIsFreed = false
    var main = Main.idle
    var hops = 0
    var arrived = Packed<Bool>()
    var cancelRequested = Packed<Bool>()
    var verdicts = Packed<Verdict?>()
    var successes = 0
    /// Per caller, whether it was woken: a parked thread's token (which a wait that serves the
    /// main queue takes each time it looks), a task resumed, a handler released to its queue.
    var woken = Packed<Bool>()
    /// Whether the gate is listed as awaiting its hop, where a serving wait finds it.
    var awaitingHop = false
  }

  /// One row of the table: a cell's phase, an event, the phase after it.
  struct Transition: Hashable, CustomStringConvertible {
    let from: String
    let event: String
    let to: String

    var description: String { "\(from) —\(event)→ \(to)" }

    /// The rows of the table in `text` whose lines start with `linePrefix` and a `|`, after its
    /// header and separator; a row may list several events, separated by `;`.
    static func rows(in text: String, linePrefix: String) -> Set<Transition> {
      var rows = Set<Transition>()
      var inTable = false
      for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
        guard line.hasPrefix(linePrefix + "|") else {
          inTable = false
          continue
        }
        let cells = line.dropFirst(linePrefix.count).split(separator: "|")
          .map { $0.trimmingCharacters(in: .whitespaces) }
        if cells == ["From", "Event", "To"] {
          inTable = true
        } else if inTable, cells.count == 3, !cells[0].hasPrefix("-") {
          for event in cells[1].split(separator: ";") {
            rows.insert(
              Transition(
                from: cells[0], event: event.trimmingCharacters(in: .whitespaces), to: cells[2]))
          }
        }
      }
      return rows
    }
  }

  /// Explores every state reachable by callers of `forms`. `losesHops`, `servesNothing` and
  /// `wakesOnlyForHops` break the world on purpose (no hop ever runs; a waiting main thread
  /// never serves; it is woken only when a hop is sent), to show that the checks can fail.
  static func explore(
    _ forms: [Form], losesHops: Bool = false, servesNothing: Bool = false,
    wakesOnlyForHops: Bool = false
  ) -> Exploration {
    MainOnceTests.explore(
      from: World(), limit: 2_000_000,
      successors: { world in
        events(in: world, forms: forms, losesHops: losesHops, servesNothing: servesNothing).map {
          event in
          var step = Step(world: world, forms: forms, wakesOnlyForHops: wakesOnlyForHops)
          step.apply(event)
          return Successor(
            event: step.name, state: step.world,
            violations: step.violations.map { "\(forms) \(event): \($0)" })
        }
      },
      phase: phase(of:),
      // A wait that never initializes may wait for ever when no attempt succeeds and its task
      // is not cancelled: nothing else can end it. Every other caller is answered, and every
      // caller answered is woken (but main context that drives the queue itself, which reads
      // its answer when its drive ends).
      unanswered: { world in
        forms.indices.compactMap { caller in
          guard world.arrived[caller] else { return nil }
          guard world.verdicts[caller] != nil else {
            let isOwed =
              forms[caller].bringsAttempt || world.successes > 0 || world.cancelRequested[caller]
            return isOwed ? "\(forms): caller \(caller) is never resolved" : nil
          }
          guard forms[caller] != .mainBlocking, !world.woken[caller] else { return nil }
          return "\(forms): caller \(caller) is answered, but never woken"
        }
      })
  }

  /// The cell's phase, as the table names it.
  static func phase(of world: World) -> String {
    switch world.word {
    case .fresh: return "fresh"
    case .inPlace: return "running"
    case .published: return "done"
    case .attached:
      guard let gate = world.gate else { return "fresh" }
      if gate.outcome != nil { return "finished" }
      if gate.runner != nil { return "running" }
      if gate.hasQueuedAttempt { return "queued" }
      return gate.callers.isEmpty ? "idle" : "awaited"
    }
  }

  enum Event: CustomStringConvertible {
    case arrive(Int)
    case hop
    case serve
    case attemptEnds(succeeds: Bool)
    case cancel(Int)
    case freeStorage

    var description: String {
      switch self {
      case .arrive(let caller): "caller \(caller) arrives"
      case .hop: "the hop runs"
      case .serve: "the waiting main thread serves"
      case .attemptEnds(let succeeds): succeeds ? "the attempt succeeds" : "the attempt throws"
      case .cancel(let caller): "caller \(caller)'s task is cancelled"
      case .freeStorage: "the token is freed"
      }
    }
  }

  /// The events that can happen next in `world`.
  static func events(
    in world: World, forms: [Form], losesHops: Bool, servesNothing: Bool
  ) -> [Event] {
    var events: [Event] = []
    let storageIsAlive = !world.storageIsFreed
    for (caller, form) in forms.enumerated() {
      // Callers of one form are alike until they arrive: they arrive in their order, which
      // leaves out only states that are the same as others with the callers renamed.
      let earlierIsOut = forms[..<caller].indices.contains {
        forms[$0] == form && !world.arrived[$0]
      }
      if storageIsAlive, !world.arrived[caller], !earlierIsOut,
        !form.isInMainContext || world.main == .idle
      {
        events.append(.arrive(caller))
      }
      if form.isTask, world.verdicts[caller] == nil, !world.cancelRequested[caller] {
        events.append(.cancel(caller))
      }
    }
    // A hop runs when the main queue is free, or from a nested run loop inside an attempt; not
    // while a wait blocks the main thread. That wait is woken when a hop is sent, and runs the
    // queued attempts itself.
    if case .waiting(let waiter) = world.main {
      if world.woken[waiter], !servesNothing { events.append(.serve) }
    } else if world.hops > 0, !losesHops {
      events.append(.hop)
    }
    if case .inAttempt = world.main {
      events.append(.attemptEnds(succeeds: true))
      events.append(.attemptEnds(succeeds: false))
    }
    // The token can be freed once no caller that borrows it is inside a call.
    let borrowerInside = forms.indices.contains { caller in
      forms[caller].borrowsStorage && world.arrived[caller]
        && (world.verdicts[caller] == nil || world.main == .inAttempt(driver: caller))
    }
    if storageIsAlive, !borrowerInside { events.append(.freeStorage) }
    return events
  }
}

/// One event applied to a copy of a world, as the engine applies it: under the lock, through the
/// machine, whose effects the engine's own interpreter performs (`GateEffects`), with this
/// step as the world they are performed in: a scripted parker (a token per caller), hop queue,
/// completion queue and word. Every promise is checked.
private struct Step: GateShell {
  typealias World = Model.World
  typealias Callers = Model.Callers

  var world: World
  let forms: [Model.Form]
  let wakesOnlyForHops: Bool
  /// The event's name in the table (callers are anonymous there).
  var name = ""
  var violations: [String] = []
  /// The caller whose arrival the step is, if it is one.
  var arriving: Int?

  init(world: World, forms: [Model.Form], wakesOnlyForHops: Bool) {
    self.world = world
    self.forms = forms
    self.wakesOnlyForHops = wakesOnlyForHops
  }

  mutating func apply(_ event: Model.Event) {
    switch event {
    case .arrive(let caller): arrive(caller)
    case .hop: hop()
    case .serve: serve()
    case .attemptEnds(let succeeds): attemptEnds(succeeds: succeeds)
    case .cancel(let caller): cancel(caller)
    case .freeStorage:
      name = "the token is freed"
      world.storageIsFreed = true
    }
    // Once the token is freed, the gate's stall timer tells it so at each look: here, right
    // after every event (`Gate.strandedWaits`).
    if world.storageIsFreed, let effects = world.gate?.storageFreed() { perform(effects) }
    // A caller leaves the queue unanswered only as a completion-form wait that nothing can
    // answer any more: the token is freed, and no attempt is queued or running. The machine
    // lets it go then, and says so.
    if let gate = world.gate {
      for caller in forms.indices
      where world.arrived[caller] && world.verdicts[caller] == nil
        && gate.callers.phase(of: caller) == .resolved
      {
        if forms[caller] != .handlerWaiting || !world.storageIsFreed {
          violations.append("caller \(caller) left the queue unanswered")
        }
      }
    }
    if let gate = world.gate, !gate.invariantHolds {
      violations.append("queued callers have no runner, no hop and no outcome")
    }
    if let gate = world.gate,
      gate.hasQueuedAttempt
        != (gate.callers.first { gate.callers.phase(of: $0) == .queued }
          != nil)
    {
      violations.append("the count of queued attempts is wrong")
    }
    if world.successes > 1 { violations.append("two attempts succeeded") }
    if let gate = world.gate, gate.running != nil, gate.runner != Model.mainThread {
      violations.append("an attempt runs outside main context")
    }
    if let gate = world.gate, gate.running != nil, world.main == .idle || isWaiting {
      violations.append("the machine runs an attempt that the main thread does not")
    }
  }

  private var isWaiting: Bool {
    if case .waiting = world.main { true } else { false }
  }

  /// Performs `effects` with the engine's interpreter, as the engine does: the first half under
  /// the engine's lock, the rest after it.
  private mutating func perform(_ effects: GateEffects<Callers>) {
    OnceCell.withLock { held in effects.performUnderLock(in: &self, holding: held) }
    effects.performAfterLock(in: &self)
  }

  /// What `OnceCell.phase()` does for a caller that borrows the storage: `true` if the cell is
  /// done (publishing a finished gate), else attaches a gate to a fresh cell.
  private mutating func cellIsDone() -> Bool {
    if world.word == .published { return true }
    if let gate = world.gate, gate.outcome != nil {
      world.word = .published
      return true
    }
    if world.gate == nil {
      let callers = Model.Callers(borrows: Packed(forms.map(\.borrowsStorage)))
      // A caller that finds an attempt running in place attaches a gate that takes it over.
      if world.word == .inPlace, case .inAttempt(let driver?) = world.main {
        world.gate = GateMachine(callers: callers, adopting: driver, runBy: Model.mainThread)
      } else {
        world.gate = GateMachine(callers: callers)
      }
      world.word = .attached
    }
    return false
  }

  private mutating func arrive(_ caller: Int) {
    world.arrived[caller] = true
    arriving = caller
    let form = forms[caller]
    // The engine's first step for a caller in main context: a fresh cell runs in place.
    if form == .mainBlocking, world.word == .fresh {
      name = "a caller in main context arrives"
      world.word = .inPlace
      world.main = .inAttempt(driver: caller)
      return
    }
    if cellIsDone() {
      name = "a caller arrives"
      // It never waits: the API answers it on the spot (a handler is submitted to its queue).
      record(.done, of: caller)
      world.woken[caller] = true
      return
    }
    let inMain = form.isInMainContext
    let thread: Int? =
      switch form {
      case .mainBlocking, .mainWaiting: Model.mainThread
      case .workerBlocking, .workerWaiting: caller + 1
      case .task, .handler, .taskWaiting, .handlerWaiting: nil
      }
    let isCancelled = world.cancelRequested[caller]
    let runningBefore = world.gate!.running
    var (arrival, effects) = world.gate!.arrive(
      caller, on: thread, inMainContext: inMain, isCancelled: isCancelled,
      bringsAttempt: form.bringsAttempt)
    let who = form.bringsAttempt ? "a caller" : "a waiter"
    switch arrival {
    case .cancelled:
      name = "a cancelled task arrives"
      if !isCancelled { violations.append("a caller that was not cancelled was told so") }
    case .reentrant:
      violations.append("a caller was taken for a re-entrant one")
    case .runByAnotherThread:
      violations.append("the main queue was held twice")
    case .wait:
      name = inMain ? "\(who) in main context arrives" : "\(who) elsewhere arrives"
      if inMain { violations.append("a caller in main context was told to wait") }
      if world.gate!.running != runningBefore {
        violations.append("an attempt started for a caller outside main context")
      }
      // A broken engine, on purpose: the serving wait is woken only when a hop is sent.
      if wakesOnlyForHops { effects.wakesServingWait = effects.hop == .sent }
    case .drive(let first):
      name = "\(who) in main context arrives"
      if !inMain { violations.append("a caller outside main context was told to drive") }
      if let first {
        world.main = .inAttempt(driver: caller)
        if !forms[first].bringsAttempt { violations.append("a waiter was given an attempt") }
      } else if form.bringsAttempt {
        violations.append("a driver found nothing to run")
      } else {
        enterWait(caller)
      }
    }
    perform(effects)
    // A main-context call from inside its own attempt, with an attempt or without, is
    // re-entrant.
    for form in [Model.Form.mainBlocking, .mainWaiting] {
      guard case .inAttempt = world.main,
        let other = forms.indices.first(where: { forms[$0] == form && !world.arrived[$0] })
      else { continue }
      var copy = world.gate!
      guard
        case .reentrant = copy.arrive(
          other, on: Model.mainThread, inMainContext: true, bringsAttempt: form.bringsAttempt
        ).0
      else {
        return violations.append("a call from inside the running attempt was not re-entrant")
      }
    }
  }

  private mutating func hop() {
    world.hops -= 1
    name = "the hop runs"
    let (step, effects) = world.gate!.mainQueueReached(on: Model.mainThread, isHop: true)
    switch step {
    case .runByAnotherThread: violations.append("the main queue was held twice")
    case .drive(let first):
      if let first {
        if world.main != .idle { violations.append("a nested hop started attempt \(first)") }
        world.main = .inAttempt(driver: nil)
      }
    }
    perform(effects)
  }

  /// The main thread blocks in a wait that serves the main queue. It looks for queued attempts
  /// once before it parks, as if woken.
  private mutating func enterWait(_ waiter: Int) {
    world.main = .waiting(waiter)
    world.woken[waiter] = true
  }

  /// A main-context wait, woken since it last looked (it takes its token), runs the attempts
  /// of the gates listed as awaiting a hop that nobody runs, as main-queue code, not as the
  /// hop, which stays on its way (`MainQueueEngine.runQueuedAttempts(on:)`).
  private mutating func serve() {
    guard case .waiting(let waiter) = world.main else { return }
    name = "the waiting main thread serves"
    world.woken[waiter] = false
    guard world.awaitingHop, let gate = world.gate, gate.runner == nil,
      gate.outcome == nil
    else { return }
    let (step, effects) = world.gate!.mainQueueReached(on: Model.mainThread, isHop: false)
    switch step {
    case .runByAnotherThread: violations.append("the main queue was held twice")
    case .drive(let first):
      if first != nil { world.main = .inAttempt(driver: waiter) }
    }
    perform(effects)
  }

  private mutating func attemptEnds(succeeds: Bool) {
    // An attempt run in place that nobody joined ends without a gate.
    if world.word == .inPlace, case .inAttempt(let driver?) = world.main {
      name = succeeds ? "the attempt succeeds" : "the attempt throws"
      if world.gate != nil { violations.append("an in-place run has a gate") }
      if succeeds { world.successes += 1 }
      world.word = succeeds ? .published : .fresh
      world.main = .idle
      return record(succeeds ? .done : .failed, of: driver)
    }
    guard case .inAttempt(let driver) = world.main, let owner = world.gate?.running else {
      return violations.append("an attempt ended that nobody ran")
    }
    name = succeeds ? "the attempt succeeds" : "the attempt throws"
    if succeeds { world.successes += 1 }
    let (next, effects) = world.gate!.settle(
      owner, with: succeeds ? 2 : nil, on: Model.mainThread)
    perform(effects)
    if succeeds, world.word != .published,
      forms.indices.contains(where: { world.verdicts[$0] == .done && forms[$0].borrowsStorage })
    {
      violations.append("a borrower was told done and the value was not published")
    }
    if let next {
      if world.successes > 0 { violations.append("attempt of \(next) started after a success") }
      return
    }
    world.main = .idle
    guard let driver, world.verdicts[driver] == nil else { return }
    if forms[driver].bringsAttempt {
      violations.append("caller \(driver) drove the queue and returned unresolved")
    } else {
      // A wait that never initializes goes back to waiting, and serving.
      enterWait(driver)
    }
  }

  private mutating func cancel(_ caller: Int) {
    name = "a task is cancelled"
    world.cancelRequested[caller] = true
    // The engine's cancellation handler: a caller not queued yet is told at its arrival.
    if world.arrived[caller], world.verdicts[caller] == nil,
      let effects = world.gate?.cancel(caller)
    {
      perform(effects)
    }
  }

  // MARK: The world the effects are performed in

  func wakeup(of caller: Int) -> Wakeup<Int, Int, Int> {
    switch forms[caller] {
    case .mainBlocking: .inPlace
    case .workerBlocking, .workerWaiting, .mainWaiting: .thread(caller)
    case .task, .taskWaiting: .task(caller)
    case .handler, .handlerWaiting: .handler(caller)
    }
  }

  /// The wait in main context that serves the main queue: the main waiter, from when it first
  /// waits until it is answered, also while it runs an attempt it serves.
  func servingWait(holding _: borrowing OnceCell.LockHeld) -> Int? {
    switch world.main {
    case .waiting(let waiter): waiter
    case .inAttempt(let driver?) where forms[driver] == .mainWaiting: driver
    case .idle, .inAttempt: nil
    }
  }

  mutating func listAwaitingHop(_ awaits: Bool, holding _: borrowing OnceCell.LockHeld) {
    if awaits, world.awaitingHop { violations.append("the gate was listed twice for a hop") }
    world.awaitingHop = awaits
  }

  mutating func record(
    _ verdict: Verdict, failure: (any Error)?, of caller: Int,
    holding _: borrowing OnceCell.LockHeld
  ) {
    record(verdict, of: caller)
  }

  private mutating func record(_ verdict: Verdict, of caller: Int) {
    if let earlier = world.verdicts[caller] {
      violations.append("caller \(caller) was resolved twice: \(earlier), then \(verdict)")
    }
    if verdict == .done, world.successes == 0, world.word != .published {
      violations.append("caller \(caller) was told done before any attempt succeeded")
    }
    if verdict == .failed, !forms[caller].bringsAttempt {
      violations.append("caller \(caller), which brought no attempt, was told one failed")
    }
    if verdict == .cancelled, !world.cancelRequested[caller] {
      violations.append("caller \(caller) was told it was cancelled, but was not")
    }
    world.verdicts[caller] = verdict
    // A waiting main thread wakes and returns.
    if world.main == .waiting(caller) { world.main = .idle }
  }

  /// A completion handler goes to its queue, where it runs after every handler released before
  /// it: the value must not be published yet, or a caller that finds it done on the fast path
  /// could submit its own first.
  mutating func release(_ handler: Int, of caller: Int, holding _: borrowing OnceCell.LockHeld) {
    if world.word == .published {
      violations.append("caller \(caller)'s handler was released after the value was published")
    }
    wake(caller)
  }

  mutating func publish(
    _ value: UInt, through borrower: Int, holding _: borrowing OnceCell.LockHeld
  ) {
    if world.storageIsFreed { violations.append("published into a freed token") }
    if !forms[borrower].borrowsStorage { violations.append("published through a handler") }
    if world.verdicts[borrower] != .done {
      violations.append("published through a caller that was not answered")
    }
    world.word = .published
  }

  mutating func unpark(_ parker: Int) {
    // The serving wait's parker also takes tokens that only ask it to look again.
    if forms[parker] == .mainWaiting, world.verdicts[parker] == nil {
      world.woken[parker] = true
    } else {
      wake(parker)
    }
  }

  mutating func resume(_ continuation: Int, of caller: Int) { wake(caller) }

  /// A caller goes on with its answer: it must have one, and one that says "done" to a caller
  /// that borrows the storage finds the value published.
  private mutating func wake(_ caller: Int) {
    guard let verdict = world.verdicts[caller] else {
      return violations.append("caller \(caller) was woken before it was answered")
    }
    if world.woken[caller], forms[caller] != .mainWaiting {
      violations.append("caller \(caller) was woken twice")
    }
    if verdict == .done, forms[caller].borrowsStorage, world.word != .published {
      violations.append("caller \(caller) was told done and finds the value unpublished")
    }
    world.woken[caller] = true
  }

  mutating func sendHop() {
    if let arriving, !forms[arriving].bringsAttempt { violations.append("a waiter sent a hop") }
    // One hop at a time, and none while a thread drives the gate, which runs the attempts
    // queued meanwhile itself: racing callers share one hop.
    if world.hops > 0 { violations.append("a hop was sent while one is on its way") }
    if world.gate?.runner != nil {
      violations.append("a hop was sent while a thread drives the gate")
    }
    world.hops += 1
  }

  // The gate's timer and its stall tracking are the engine's, beside the machine: the model has no
  // observer, and never asks them.
  mutating func startTimer() {}
  mutating func tellStallEnded(since: UInt64, finished: Bool) {}

  /// A caller taken out of the gate: answered, or a completion-form wait that nothing can
  /// answer any more.
  mutating func letGo(_ caller: Int) {
    if world.verdicts[caller] == nil, forms[caller] != .handlerWaiting || !world.storageIsFreed {
      violations.append("caller \(caller) was let go, though it is not an unanswered wait")
    }
  }
}

/// A value that fits in a few bits, for ``Packed``.
protocol PackedElement {
  static var width: Int { get }
  static func decode(_ bits: UInt64) -> Self
  var encoded: UInt64 { get }
}

/// Up to 16 small values in one word.
struct Packed<Element: PackedElement>: Hashable {
  private var bits: UInt64 = 0

  init() {}

  init(_ elements: [Element]) {
    for (index, element) in elements.enumerated() { self[index] = element }
  }

  subscript(index: Int) -> Element {
    get {
      Element.decode((bits >> UInt64(index * Element.width)) & (1 << Element.width - 1))
    }
    set {
      let shift = UInt64(index * Element.width)
      bits = bits & ~((1 << Element.width - 1) << shift) | newValue.encoded << shift
    }
  }
}

extension Bool: PackedElement {
  static var width: Int { 1 }
  static func decode(_ bits: UInt64) -> Bool { bits == 1 }
  var encoded: UInt64 { self ? 1 : 0 }
}

extension CallerPhase: PackedElement {
  private static let all: [CallerPhase] = [.arriving, .queued, .awaiting, .running, .resolved]
  static var width: Int { 3 }
  static func decode(_ bits: UInt64) -> CallerPhase { all[Int(bits)] }
  var encoded: UInt64 { UInt64(Self.all.firstIndex(of: self)!) }
}

extension Optional: PackedElement where Wrapped == Verdict {
  private static let all: [Verdict?] = [nil, .done, .failed, .cancelled]
  static var width: Int { 2 }
  static func decode(_ bits: UInt64) -> Verdict? { all[Int(bits)] }
  var encoded: UInt64 { UInt64(Self.all.firstIndex(of: self)!) }
}

/// A queue of up to 15 caller numbers below 16, in one word.
struct PackedQueue: Hashable, CallerBatch {
  private var entries = Packed<Nibble>()
  private(set) var count = 0

  private struct Nibble: PackedElement {
    let value: Int
    static var width: Int { 4 }
    static func decode(_ bits: UInt64) -> Nibble { Nibble(value: Int(bits)) }
    var encoded: UInt64 { UInt64(value) }
  }

  init() {}

  mutating func append(_ caller: Int) {
    entries[count] = Nibble(value: caller)
    count += 1
  }

  func makeIterator() -> some IteratorProtocol<Int> {
    (0..<count).lazy.map { entries[$0].value }.makeIterator()
  }

  mutating func remove(_ caller: Int) {
    guard let index = (0..<count).first(where: { entries[$0].value == caller }) else { return }
    for next in index..<count - 1 { entries[next] = entries[next + 1] }
    count -= 1
    entries[count] = Nibble(value: 0)
  }

  func first(where predicate: (Int) -> Bool) -> Int? {
    (0..<count).lazy.map { entries[$0].value }.first(where: predicate)
  }

  mutating func removeFirst() -> Int? {
    guard count > 0 else { return nil }
    let first = entries[0].value
    remove(first)
    return first
  }
}
