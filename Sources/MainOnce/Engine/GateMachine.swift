// MARK: - The state machine of a main-queue once-cell
//
// `GateMachine` is every decision the engine makes about a cell that is not done: who runs the
// next attempt, who sends the hop, how each caller's wait ends, through whom the value is
// published. It is plain data and pure transitions: each returns the caller's next role and the
// effects to perform (`GateEffects`, a fixed-size value), which the interpreter in the second
// half of this file performs, each at the point it states, in the engine (`MainQueueEngine`,
// under `OnceCell.lock` and after it) or in a model.
// `Tests/MainOnceTests/GateMachineTests.swift` runs the same transitions and the same
// interpreter over every reachable state of small configurations, against a scripted parker and
// hop queue, checking the invariants below in each.
//
// A cell's phase:
//
// | Phase    | word      | outcome   | runner   | callers   | hopIsOnItsWay |
// | -------- | --------- | --------- | -------- | --------- | ------------- |
// | fresh    | 1         | (no gate)                                        |
// | idle     | F | 1     | nil       | nil      | none      | either        |
// | awaited  | F | 1     | nil       | nil      | waiters   | either        |
// | queued   | F | 1     | nil       | nil      | some      | true          |
// | running  | F | 1, or R | nil     | a thread | any       | either        |
// | finished | F | 1     | the value | nil      | none      | either        |
// | done     | the value | (the gate is released)                           |
//
// A caller's phase (`CallerPhase`): arriving → queued → running → resolved; queued → resolved
// (another caller's attempt succeeded, or a task was cancelled); arriving → resolved (a task
// cancelled before it queued never does). A *waiter*, a caller that brings no attempt (a wait
// that never initializes), goes arriving → awaiting → resolved (an attempt succeeded, or its
// task was cancelled); *awaited* is a gate whose callers are all waiters: nothing runs, and no
// hop is needed until a caller brings an attempt. A waiter in main context drives the attempts
// queued when it arrives, then serves the main queue while it waits: woken by each attempt
// queued meanwhile, it runs the queued attempts itself ("the waiting main thread serves"),
// since no hop can run while it blocks the main queue.
//
// The transitions, every one the exhaustive test observes and no other (it compares this
// table, and the one in the DocC article "How a token moves", with what it observes). An
// arrival is `arrive` (after `OnceCell.phase()`, which attaches a gate to a fresh cell and
// publishes a finished one: "a caller arrives" is a caller that finds the cell finished or
// done); the hop is `mainQueueReached`; an attempt's end is `settle` (the attempt's result
// recorded, then the next attempt started, in one critical section); a cancellation is
// `cancel`; a freed token is `_OnceWord`'s deinit, which the gate learns at the next look of
// its stall timer (`Gate.strandedWaits(holding:)`, `storageFreed`). A success ends in *done*
// when a caller that borrows the storage waits (the value is published through it), else in
// *finished*.
//
// | From     | Event                                                                                                                                                       | To       |
// | -------- | ----------------------------------------------------------------------------------------------------------------------------------------------------------- | -------- |
// | fresh    | a task is cancelled; the token is freed                                                                                                                     | fresh    |
// | fresh    | a cancelled task arrives                                                                                                                                    | idle     |
// | fresh    | a waiter elsewhere arrives; a waiter in main context arrives                                                                                                | awaited  |
// | fresh    | a caller elsewhere arrives                                                                                                                                  | queued   |
// | fresh    | a caller in main context arrives                                                                                                                            | running  |
// | idle     | a cancelled task arrives; a task is cancelled; the hop runs; the token is freed                                                                             | idle     |
// | idle     | a waiter elsewhere arrives; a waiter in main context arrives                                                                                                | awaited  |
// | idle     | a caller elsewhere arrives                                                                                                                                  | queued   |
// | idle     | a caller in main context arrives                                                                                                                            | running  |
// | awaited  | a task is cancelled; the token is freed                                                                                                                     | idle     |
// | awaited  | a waiter elsewhere arrives; a waiter in main context arrives; a cancelled task arrives; a task is cancelled; the hop runs; the waiting main thread serves   | awaited  |
// | awaited  | a caller elsewhere arrives                                                                                                                                  | queued   |
// | awaited  | a caller in main context arrives                                                                                                                            | running  |
// | queued   | a task is cancelled                                                                                                                                         | idle     |
// | queued   | a task is cancelled                                                                                                                                         | awaited  |
// | queued   | a caller elsewhere arrives; a waiter elsewhere arrives; a cancelled task arrives; a task is cancelled; the token is freed                                   | queued   |
// | queued   | a caller in main context arrives; a waiter in main context arrives; the hop runs; the waiting main thread serves                                            | running  |
// | running  | the attempt throws                                                                                                                                          | fresh    |
// | running  | the attempt throws                                                                                                                                          | idle     |
// | running  | the attempt throws                                                                                                                                          | awaited  |
// | running  | a caller elsewhere arrives; a waiter elsewhere arrives; a cancelled task arrives; a task is cancelled; the attempt throws; the hop runs; the token is freed | running  |
// | running  | the attempt succeeds                                                                                                                                        | finished |
// | running  | the attempt succeeds                                                                                                                                        | done     |
// | finished | a task is cancelled; the hop runs; the token is freed                                                                                                       | finished |
// | finished | a caller arrives                                                                                                                                            | done     |
// | done     | a caller arrives; a task is cancelled; the hop runs; the token is freed                                                                                     | done     |
//
// `F` is the gate's address, with its low bit set: a done word is even. `R` marks an attempt
// that a caller in main context runs in place, with no gate, because nobody else called: the
// runner's thread id, shifted, with the two low bits set (`OnceCell.startInPlaceRun(on:)`). It
// allocates nothing. A caller that arrives while it runs attaches a gate that takes the run
// over (`init(callers:adopting:runBy:)`), and the runner drives the gate when its attempt
// returns; with nobody arriving, a success publishes and a throw leaves the cell fresh.
//
// Invariant, after every transition (`invariantHolds`): callers that queued an attempt have a
// runner, a hop on its way, or a finished gate to be told of; waiters need one only while
// such a caller is queued. Safety, checked by the test in every
// state: at most one attempt succeeds, and none starts after it; attempts start only in main
// context (the engine also checks it in release builds,
// `MainQueueEngine.driveUnlessDriven(_:on:isHop:)`); no caller is resolved twice, and a caller
// that borrows the storage and is told "done" finds it published; one hop at a time is sent,
// and none while a thread runs the gate.

/// Where one caller of a gate is in its wait.
enum CallerPhase: Hashable, Sendable {
  /// Made, not queued yet.
  case arriving
  /// Queued: its attempt has not started, and nothing has ended its wait.
  case queued
  /// Queued without an attempt of its own (a wait that never initializes): it waits for
  /// another caller's attempt to succeed, and is never chosen to run one.
  case awaiting
  /// Its attempt runs; it waits for that attempt's result.
  case running
  /// Told how its wait ended. Never changes again.
  case resolved
}

/// How a caller's wait ends, as the machine decides it: an attempt succeeded (its own or
/// another's), its own attempt failed, or it was cancelled before its attempt started.
enum Verdict: Hashable, Sendable {
  case done
  case failed
  case cancelled
}

/// Callers taken out of a gate, in the order they are told: those a transition answered or
/// let go (see ``GateEffects``). The engine's is threaded through its waiters, so that it
/// allocates nothing; a model's is packed in a word.
protocol CallerBatch: Sequence {
  init()
  mutating func append(_ caller: Element)
  /// Takes the first caller out; `nil` if there is none.
  mutating func removeFirst() -> Element?
}

/// A gate's callers, in arrival order, each with its phase: what ``GateMachine`` needs of
/// the queue. The engine's is threaded through its waiters (``WaiterQueue``); the test's is an
/// array of plain values.
protocol GateCallers {
  associatedtype Caller
  associatedtype Thread: Equatable
  associatedtype Batch: CallerBatch where Batch.Element == Caller

  /// Whether no caller is queued or running.
  var isEmpty: Bool { get }
  func phase(of caller: Caller) -> CallerPhase
  mutating func setPhase(_ phase: CallerPhase, of caller: Caller)
  /// Whether `caller` borrows the cell's storage until it is resolved (blocking and `await`
  /// callers do; completion handlers do not).
  func borrowsStorage(_ caller: Caller) -> Bool
  mutating func append(_ caller: Caller)
  /// Takes `caller` out, if it is in.
  mutating func remove(_ caller: Caller)
  /// The first caller, in arrival order, for which `predicate` holds.
  func first(where predicate: (Caller) -> Bool) -> Caller?
  /// Takes the first caller out, in arrival order; `nil` if there is none.
  mutating func removeFirst() -> Caller?
}

/// What a caller that arrives does next.
enum Arrival<Caller, Thread> {
  /// It is a task cancelled before it could queue: the effects answer it as cancelled.
  case cancelled
  /// Its thread runs one of the gate's attempts: a re-entrant call.
  case reentrant
  /// It is in main context and nobody runs the gate: it runs the queue from `first`.
  case drive(first: Caller?)
  /// It waits (the effects send the hop, if one is needed).
  case wait
  /// It is in main context, but another thread runs the gate's attempt: only one thread can
  /// hold the main queue, so the engine's picture of it is wrong.
  case runByAnotherThread(Thread)
}

/// What a hop that reaches the main queue does.
enum HopStep<Caller, Thread> {
  /// It runs the queue from `first` (`nil`: nothing to run).
  case drive(first: Caller?)
  /// Another thread runs the gate's attempt while this one holds the main queue.
  case runByAnotherThread(Thread)
}

/// The state of a once-cell's gate and the transitions between its states (see the tables at
/// the top of this file). Plain data; every method is called under `OnceCell.lock`, and
/// returns what to do about it, if anything, as ``GateEffects``.
struct GateMachine<Callers: GateCallers> {
  typealias Caller = Callers.Caller
  typealias Thread = Callers.Thread
  typealias Effects = GateEffects<Callers>

  /// The callers queued or running, in arrival order.
  private(set) var callers: Callers
  /// The value of the attempt that succeeded, once one has: then nothing runs again.
  private(set) var outcome: UInt?
  /// The thread in main context that runs the queued attempts, one after another.
  private(set) var runner: Thread?
  /// The caller whose attempt runs.
  private(set) var running: Caller?
  /// Whether a hop was sent that has not reached the main queue yet.
  private(set) var hopIsOnItsWay = false
  /// How many callers are queued with an attempt that has not started: counted, so that the
  /// invariant, checked after every transition, does not walk a queue of waiters.
  private var queuedAttempts = 0
  /// Whether the cell's storage is gone (the token was freed): then no caller can arrive, and
  /// a wait that never initializes is answered only by an attempt queued or running already.
  private(set) var storageIsFreed = false

  init(callers: Callers) {
    self.callers = callers
  }

  /// A machine for a cell whose attempt `owner` already runs in place on `thread`, without a
  /// gate, when another caller arrives: `owner` is its running caller.
  init(callers: Callers, adopting owner: Caller, runBy thread: Thread) {
    self.callers = callers
    self.callers.setPhase(.running, of: owner)
    self.callers.append(owner)
    runner = thread
    running = owner
  }

  /// Whether callers that queued an attempt have a runner, a hop on its way, or a finished
  /// gate. Callers that wait without an attempt need none of them: with no attempt queued,
  /// nothing can end their wait but a caller that brings one.
  var invariantHolds: Bool {
    outcome != nil || runner != nil || hopIsOnItsWay || !hasQueuedAttempt
  }

  /// Whether a caller's attempt is queued, not started yet.
  var hasQueuedAttempt: Bool { queuedAttempts > 0 }

  /// A caller arrives: `thread` is its thread (`nil` for a task or a completion handler, which
  /// never run an attempt where they are), `inMainContext` whether it holds the main queue,
  /// `isCancelled` whether it is a task cancelled already (its cancellation handler, if it ran
  /// first, found nothing to take out of the queue), and `bringsAttempt` whether it brings an
  /// attempt (a wait that never initializes does not: it never sends a hop, and in main context
  /// it drives the attempts already queued, if any, and then serves the main queue while it
  /// waits, `.drive(first: nil)` when none is).
  ///
  /// A caller that waits with an attempt sends the hop if nobody runs the gate and none is on
  /// its way, and wakes the wait that serves the main queue, if one does: such a wait runs
  /// every attempt queued while it blocks the main queue, hop or not.
  mutating func arrive(
    _ caller: Caller, on thread: Thread?, inMainContext: Bool, isCancelled: Bool = false,
    bringsAttempt: Bool = true
  ) -> (Arrival<Caller, Thread>, Effects) {
    if isCancelled {
      callers.setPhase(.resolved, of: caller)
      var effects = Effects(verdict: .cancelled)
      effects.callers.append(caller)
      return (.cancelled, effects)
    }
    if let runner, let thread, runner == thread { return (.reentrant, Effects()) }
    callers.setPhase(bringsAttempt ? .queued : .awaiting, of: caller)
    callers.append(caller)
    if bringsAttempt { queuedAttempts += 1 }
    guard inMainContext, let thread else {
      let hop: Effects.Hop? = bringsAttempt && claimHop() ? .sent : nil
      return (.wait, Effects(hop: hop, wakesServingWait: bringsAttempt))
    }
    if let runner { return (.runByAnotherThread(runner), Effects()) }
    return (.drive(first: startNextAttempt(on: thread)), Effects())
  }

  /// Whether the caller that just queued must send a hop: nobody runs the gate and no hop is
  /// on its way. Marks the hop as on its way.
  private mutating func claimHop() -> Bool {
    guard runner == nil, !hopIsOnItsWay, !callers.isEmpty else { return false }
    hopIsOnItsWay = true
    return true
  }

  /// A hop reaches the main queue on `thread` (`isHop`), or main-queue code that serves
  /// initializers finds the gate waiting for one: either drives it unless `thread` does.
  mutating func mainQueueReached(
    on thread: Thread, isHop: Bool
  ) -> (HopStep<Caller, Thread>, Effects) {
    if isHop { hopIsOnItsWay = false }
    let effects = Effects(hop: isHop ? .arrived : nil)
    guard let runner else { return (.drive(first: startNextAttempt(on: thread)), effects) }
    // An initializer on this thread served the hop from a nested run loop: its caller goes on
    // driving the queue when it returns.
    return (runner == thread ? .drive(first: nil) : .runByAnotherThread(runner), effects)
  }

  /// Makes `thread` the runner and returns the first queued caller, whose attempt it runs next;
  /// `nil`, and no runner, once no attempt is queued (a success leaves nobody: it resolves
  /// everyone, and a caller that comes later finds the cell finished before it can queue).
  mutating func startNextAttempt(on thread: Thread) -> Caller? {
    guard let owner = callers.first(where: { callers.phase(of: $0) == .queued }) else {
      runner = nil
      running = nil
      return nil
    }
    callers.setPhase(.running, of: owner)
    queuedAttempts -= 1
    runner = thread
    running = owner
    return owner
  }

  /// Records the end of `owner`'s attempt, `value` if it succeeded, `nil` if it failed, then
  /// starts the next attempt on `thread` (the runner's), if one is queued: one critical
  /// section. On success the gate is finished, every caller is answered as done (the owner
  /// first), and the value is published through the first caller answered that borrows the
  /// storage (the owner, if it does), if one waits; on failure the failure goes to `owner`
  /// alone, and the runner goes on with the queue. Returns the caller whose attempt runs next.
  mutating func settle(
    _ owner: Caller, with value: UInt?, on thread: Thread
  ) -> (next: Caller?, Effects) {
    callers.remove(owner)
    callers.setPhase(.resolved, of: owner)
    running = nil
    var effects = Effects(verdict: value == nil ? .failed : .done)
    effects.callers.append(owner)
    guard let value else { return (startNextAttempt(on: thread), effects) }
    outcome = value
    runner = nil
    while let caller = callers.removeFirst() {
      callers.setPhase(.resolved, of: caller)
      effects.callers.append(caller)
    }
    queuedAttempts = 0
    effects.publishes = effects.callers.first { callers.borrowsStorage($0) }.map { (value, $0) }
    return (startNextAttempt(on: thread), effects)
  }

  /// The cell's storage is gone (the token was freed), as the gate learns it at a look of
  /// its stall timer: repeated at each look. Its waits that never initialize, completion
  /// handlers (the others borrow the storage, so none is left), can no longer be answered once
  /// no attempt is queued or running: they leave the queue, never answered, and the gate
  /// keeps nothing alive for them (the effects let them go, with no verdict).
  mutating func storageFreed() -> Effects {
    var effects = Effects()
    storageIsFreed = true
    guard outcome == nil, runner == nil, queuedAttempts == 0 else { return effects }
    while let caller = callers.removeFirst() {
      callers.setPhase(.resolved, of: caller)
      effects.callers.append(caller)
    }
    return effects
  }

  /// A queued task's caller was cancelled: it leaves the queue unless its attempt has started
  /// or it is resolved already. (A task cancelled before it queued is told so when it arrives.)
  mutating func cancel(_ caller: Caller) -> Effects {
    let phase = callers.phase(of: caller)
    guard phase == .queued || phase == .awaiting else { return Effects() }
    if phase == .queued { queuedAttempts -= 1 }
    callers.remove(caller)
    callers.setPhase(.resolved, of: caller)
    var effects = Effects(verdict: .cancelled)
    effects.callers.append(caller)
    return effects
  }
}

extension GateMachine: Equatable where Callers: Equatable, Caller: Equatable {}
extension GateMachine: Hashable where Callers: Hashable, Caller: Hashable, Thread: Hashable {}

// MARK: - What a transition asks for, and the interpreter that does it
//
// The machine above decides; what follows performs. Each transition returns a `GateEffects`, a
// fixed-size value with at most one of each effect (the callers it answers or lets go are a
// batch threaded through them, which allocates nothing). `performUnderLock(in:holding:)` and
// `performAfterLock(in:)` are the whole interpreter: the engine calls the first inside the
// critical section that made the transition and the second right after it, and the exhaustive
// test (`Tests/MainOnceTests/GateMachineTests.swift`) calls the same two against a scripted
// parker, hop queue and word, so the glue between the machine and the world is inside the
// model. Where (a `GateShell`) is the engine's gate itself, with its waiters, the main queue
// and the observer (`Gate.swift`), or the model's.
//
// Each effect, where it is performed and why, in the order the interpreter performs them:
//
// | Effect                          | Where                  | Why there                                           |
// | ------------------------------- | ---------------------- | --------------------------------------------------- |
// | list the gate as awaiting a hop (or strike it off when it arrives) | under the lock | a main-queue wait that serves runs what the list holds, and reads it under the lock |
// | wake the wait that serves the main queue | under the lock | that wait is made and replaced under the lock; an unpark leaves a token and never blocks |
// | record each caller's answer, release a completion handler to its queue | under the lock, before the publish | handlers keep the order of the calls: a caller that finds the word done on the fast path submits its own after them |
// | publish the value               | under the lock, last   | through a caller that borrows the storage, answered but not yet woken: the storage is still in place; the releasing store orders every write of the attempt before it |
// | send the hop                    | after the lock         | a main thread that picks it up at once must not find the lock held |
// | start the stall timer           | after the lock         | it takes the lock at its first look |
// | tell the observer that a reported stall ended | after the lock, before any wake | the report of the end comes before any caller goes on; the observer takes locks of its own |
// | let go of what each caller taken out brought, then wake it if it was answered | after the lock | an attempt, or a stranded handler, may hold the last reference to anything, whose deinit may call MainOnce; a blocking caller's attempt must be let go before its call returns; a woken caller must not find the lock held. How to wake it is read before the wake, and nothing touches it after |
//
// The one memory ordering the model cannot check, sequential as it is, is the publish's: it
// stays where it was, a releasing store under the lock after the attempt returned, paired with
// the acquiring loads of the fast path and of every caller that finds the cell done. The
// answer's record (`isResolved`, a releasing store) pairs with the acquiring load of a caller
// that reads it after its wake; an unpark is a releasing exchange, and a continuation's resume
// orders what came before it.

/// How a caller learns the end of its wait: a parked thread is unparked; a suspended task is
/// resumed; a completion-form call's handler is released to its queue; main-context code that
/// drives the queue itself reads its answer when it is done (`inPlace`).
enum Wakeup<Parker, Continuation, Handler> {
  case thread(Parker)
  case task(Continuation)
  case handler(Handler)
  case inPlace
}

/// What one transition of a gate asks for: decided by ``GateMachine`` (and, for the timer
/// and the observer, by the gate's stall tracking beside it), performed by the interpreter below.
struct GateEffects<Callers: GateCallers> {
  typealias Caller = Callers.Caller

  /// A hop sent, or arrived.
  enum Hop {
    /// Nobody runs the gate and no hop was on its way: one is sent.
    case sent
    /// The hop sent earlier reached the main queue.
    case arrived
  }

  /// The callers the transition takes out of the gate, in the order they are told: each is
  /// answered with ``verdict``, or, when there is none, let go unanswered (a freed token's
  /// completion-form waits, which nothing can answer any more).
  var callers = Callers.Batch()
  var verdict: Verdict?
  /// The error of the attempt whose failure the verdict tells (the engine's; a model has none).
  var failure: (any Error)?
  /// The value to publish, through a caller that borrows the storage.
  var publishes: (value: UInt, through: Caller)?
  var hop: Hop?
  /// An attempt was queued that no hop may run while a wait blocks the main queue.
  var wakesServingWait = false
  /// The gate's first caller that does not block arrived: its stall timer starts.
  var startsTimer = false
  /// A stall an observer reported ended: when its callers had begun to wait, and whether the
  /// gate finished (rather than its last caller left).
  var stallEnded: (since: UInt64, finished: Bool)?

  /// Performs the effects that belong under the lock, in the order of the table above: the
  /// caller holds it, and made the transition in the same critical section.
  func performUnderLock<Shell: GateShell>(
    in shell: inout Shell, holding held: borrowing OnceCell.LockHeld
  ) where Shell.Callers == Callers {
    if let hop { shell.listAwaitingHop(hop == .sent, holding: held) }
    if wakesServingWait, let serving = shell.servingWait(holding: held) { shell.unpark(serving) }
    for caller in callers where verdict != nil {
      shell.record(verdict!, failure: failure, of: caller, holding: held)
      if case .handler(let handler) = shell.wakeup(of: caller) {
        shell.release(handler, of: caller, holding: held)
      }
    }
    if let (value, borrower) = publishes { shell.publish(value, through: borrower, holding: held) }
  }

  /// Performs the rest, in the order of the table above, once the lock is released. A caller
  /// let go unanswered is a completion-form wait: there is nothing to wake.
  consuming func performAfterLock<Shell: GateShell>(in shell: inout Shell)
  where Shell.Callers == Callers {
    if hop == .sent { shell.sendHop() }
    if startsTimer { shell.startTimer() }
    if let (since, finished) = stallEnded { shell.tellStallEnded(since: since, finished: finished) }
    while let caller = callers.removeFirst() {
      shell.letGo(caller)
      switch shell.wakeup(of: caller) {
      case .thread(let parker): shell.unpark(parker)
      case .task(let continuation): shell.resume(continuation, of: caller)
      case .handler, .inPlace: break
      }
    }
  }
}

/// Where a gate's effects are performed: the engine's gate, with its waiters, the main
/// queue and the observer (`Gate.swift`), or a model's. Each requirement is one effect, or what the
/// interpreter reads to perform one; those that take the lock's proof are performed under it.
protocol GateShell {
  associatedtype Callers: GateCallers
  associatedtype Parker
  associatedtype Continuation
  associatedtype Handler
  typealias Caller = Callers.Caller

  /// How `caller` learns the end of its wait: read under the lock, or after it for a caller
  /// answered and not woken yet (nothing changes it then).
  func wakeup(of caller: Caller) -> Wakeup<Parker, Continuation, Handler>
  /// The parker of the wait that blocks the main queue and serves it, if one does.
  func servingWait(holding held: borrowing OnceCell.LockHeld) -> Parker?
  /// Lists the gate as awaiting its hop (`true`), or strikes it off (`false`).
  mutating func listAwaitingHop(_ awaits: Bool, holding held: borrowing OnceCell.LockHeld)
  /// Records how `caller`'s wait ended (`failure`: the error of its attempt, if it failed): from
  /// here on it is answered.
  mutating func record(
    _ verdict: Verdict, failure: (any Error)?, of caller: Caller,
    holding held: borrowing OnceCell.LockHeld)
  /// Releases a completion-form caller's handler to its queue, with its answer.
  mutating func release(
    _ handler: Handler, of caller: Caller, holding held: borrowing OnceCell.LockHeld)
  /// Stores `value` in the word of the storage `caller` borrows.
  mutating func publish(
    _ value: UInt, through caller: Caller, holding held: borrowing OnceCell.LockHeld)
  /// Leaves a wake-up token with `parker`, waking its thread if it sleeps.
  mutating func unpark(_ parker: Parker)
  /// Sends the hop to the main queue.
  mutating func sendHop()
  /// Starts the timer that watches the gate's callers that do not block.
  mutating func startTimer()
  /// Tells the observer that the stall it reported ended.
  mutating func tellStallEnded(since: UInt64, finished: Bool)
  /// Lets go of what a caller taken out of the gate brought (its attempt; a stranded wait's
  /// handler): nothing runs it any more.
  mutating func letGo(_ caller: Caller)
  /// Resumes an answered task with its answer.
  mutating func resume(_ continuation: Continuation, of caller: Caller)
}
