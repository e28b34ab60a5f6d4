// MARK: - The state machine of a main-queue once-cell
//
// `FlightMachine` is every decision the engine makes about a cell that is not done: who runs the
// next attempt, who sends the hop, how each caller's wait ends. It is plain data and pure
// transitions; the engine (`MainQueueEngine`) performs what they return, under `OnceCell.lock`,
// and `Tests/MainOnceTests/FlightMachineTests.swift` runs the same code over every reachable
// state of small configurations, checking the invariants below in each.
//
// A cell's phase:
//
// | Phase    | word      | outcome   | runner   | callers   | hopIsOnItsWay |
// | -------- | --------- | --------- | -------- | --------- | ------------- |
// | fresh    | 1         | (no flight)                                      |
// | idle     | F | 1     | nil       | nil      | none      | either        |
// | awaited  | F | 1     | nil       | nil      | waiters   | either        |
// | queued   | F | 1     | nil       | nil      | some      | true          |
// | running  | F | 1, or R | nil     | a thread | any       | either        |
// | finished | F | 1     | the value | nil      | none      | either        |
// | done     | the value | (the flight is released)                         |
//
// A caller's phase (`CallerPhase`): arriving → queued → running → resolved; queued → resolved
// (another caller's attempt succeeded, or a task was cancelled); arriving → resolved (a task
// cancelled before it queued never does). A *waiter*, a caller that brings no attempt (a wait
// that never initializes), goes arriving → awaiting → resolved (an attempt succeeded, or its
// task was cancelled); *awaited* is a flight whose callers are all waiters: nothing runs, and no
// hop is needed until a caller brings an attempt. A waiter in main context drives the attempts
// queued when it arrives, then serves the main queue while it waits: woken by each attempt
// queued meanwhile, it runs the queued attempts itself ("the waiting main thread serves"),
// since no hop can run while it blocks the main queue.
//
// The transitions, every one the exhaustive test observes and no other (it compares this
// table, and the one in the DocC article "How a token moves", with what it observes). An
// arrival is `arrive` (after `OnceCell.phase()`, which attaches a flight to a fresh cell and
// publishes a finished one: "a caller arrives" is a caller that finds the cell finished or
// done); the hop is `mainQueueReached`; an attempt's end is `finish`, then `startNextAttempt`
// in the same critical section; a cancellation is `cancel`; a freed token is `_OnceWord`'s
// deinit, which the flight learns at the next look of its stall timer
// (`Flight.strandedWaits(holding:)`, `storageFreed`). A success ends in *done* when a caller that borrows the storage waits (the value is
// published through it), else in *finished*.
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
// `F` is the flight's address, with its low bit set: a done word is even. `R` marks an attempt
// that a caller in main context runs in place, with no flight, because nobody else called: the
// runner's thread id, shifted, with the two low bits set (`OnceCell.startInPlaceRun(on:)`). It
// allocates nothing. A caller that arrives while it runs attaches a flight that takes the run
// over (`init(callers:adopting:runBy:)`), and the runner drives the flight when its attempt
// returns; with nobody arriving, a success publishes and a throw leaves the cell fresh.
//
// Invariant, after every transition (`invariantHolds`): callers that queued an attempt have a
// runner, a hop on its way, or a finished flight to be told of; waiters need one only while
// such a caller is queued. Safety, checked by the test in every
// state: at most one attempt succeeds, and none starts after it; attempts start only in main
// context (the engine also checks it in release builds,
// `MainQueueEngine.driveUnlessDriven(_:on:isHop:)`); no caller is resolved twice, and a caller
// that borrows the storage and is told "done" finds it published; one hop at a time is sent,
// and none while a thread runs the flight.

/// Where one caller of a flight is in its wait.
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

/// A flight's callers, in arrival order, each with its phase: what ``FlightMachine`` needs of
/// the queue. The engine's is threaded through its waiters (``WaiterQueue``); the test's is an
/// array of plain values.
protocol FlightCallers {
  associatedtype Caller
  associatedtype Thread: Equatable

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
  /// It is a task cancelled before it could queue: its wait ends as cancelled.
  case cancelled
  /// Its thread runs one of the flight's attempts: a re-entrant call.
  case reentrant
  /// It is in main context and nobody runs the flight: it runs the queue from `first`.
  case drive(first: Caller?)
  /// It waits; it sends the hop if `sendsHop`.
  case wait(sendsHop: Bool)
  /// It is in main context, but another thread runs the flight's attempt: only one thread can
  /// hold the main queue, so the engine's picture of it is wrong.
  case runByAnotherThread(Thread)
}

/// What a hop that reaches the main queue does.
enum HopStep<Caller, Thread> {
  /// It runs the queue from `first` (`nil`: nothing to run).
  case drive(first: Caller?)
  /// Another thread runs the flight's attempt while this one holds the main queue.
  case runByAnotherThread(Thread)
}

/// The state of a once-cell's flight and the transitions between its states (see the tables at
/// the top of this file). Plain data; every method is called under `OnceCell.lock`.
struct FlightMachine<Callers: FlightCallers> {
  typealias Caller = Callers.Caller
  typealias Thread = Callers.Thread

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
  /// flight, when another caller arrives: `owner` is its running caller.
  init(callers: Callers, adopting owner: Caller, runBy thread: Thread) {
    self.callers = callers
    self.callers.setPhase(.running, of: owner)
    self.callers.append(owner)
    runner = thread
    running = owner
  }

  /// Whether callers that queued an attempt have a runner, a hop on its way, or a finished
  /// flight. Callers that wait without an attempt need none of them: with no attempt queued,
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
  mutating func arrive(
    _ caller: Caller, on thread: Thread?, inMainContext: Bool, isCancelled: Bool = false,
    bringsAttempt: Bool = true
  ) -> Arrival<Caller, Thread> {
    if isCancelled {
      callers.setPhase(.resolved, of: caller)
      return .cancelled
    }
    if let runner, let thread, runner == thread { return .reentrant }
    callers.setPhase(bringsAttempt ? .queued : .awaiting, of: caller)
    callers.append(caller)
    if bringsAttempt { queuedAttempts += 1 }
    guard inMainContext, let thread else { return .wait(sendsHop: bringsAttempt && claimHop()) }
    if let runner { return .runByAnotherThread(runner) }
    return .drive(first: startNextAttempt(on: thread))
  }

  /// Whether the caller that just queued must send a hop: nobody runs the flight and no hop is
  /// on its way. Marks the hop as on its way.
  private mutating func claimHop() -> Bool {
    guard runner == nil, !hopIsOnItsWay, !callers.isEmpty else { return false }
    hopIsOnItsWay = true
    return true
  }

  /// A hop reaches the main queue on `thread` (`isHop`), or main-queue code that serves
  /// initializers finds the flight waiting for one: either drives it unless `thread` does.
  mutating func mainQueueReached(on thread: Thread, isHop: Bool) -> HopStep<Caller, Thread> {
    if isHop { hopIsOnItsWay = false }
    guard let runner else { return .drive(first: startNextAttempt(on: thread)) }
    // An initializer on this thread served the hop from a nested run loop: its caller goes on
    // driving the queue when it returns.
    return runner == thread ? .drive(first: nil) : .runByAnotherThread(runner)
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

  /// Records the end of `owner`'s attempt: `value` if it succeeded, `nil` if it failed. On
  /// success the flight is finished and every caller is resolved as done, and this returns the
  /// caller to publish the value through (one that borrows the storage), if any; on failure the
  /// failure goes to `owner` alone, and the runner goes on with the queue. `resolve` is told
  /// each verdict, in order.
  mutating func finish(
    _ owner: Caller, with value: UInt?, resolve: (Caller, Verdict) -> Void
  ) -> Caller? {
    callers.remove(owner)
    callers.setPhase(.resolved, of: owner)
    running = nil
    guard let value else {
      resolve(owner, .failed)
      return nil
    }
    let borrower =
      callers.borrowsStorage(owner) ? owner : callers.first { callers.borrowsStorage($0) }
    outcome = value
    runner = nil
    resolve(owner, .done)
    while let caller = callers.removeFirst() {
      callers.setPhase(.resolved, of: caller)
      resolve(caller, .done)
    }
    queuedAttempts = 0
    return borrower
  }

  /// The cell's storage is gone (the token was freed), as the flight learns it at a look of
  /// its stall timer: repeated at each look. Its waits that never initialize, completion
  /// handlers (the others borrow the storage, so none is left), can no longer be answered once
  /// no attempt is queued or running: they leave the queue, never answered, and the flight
  /// keeps nothing alive for them. `strand` is given each caller let go.
  mutating func storageFreed(strand: (Caller) -> Void) {
    storageIsFreed = true
    guard outcome == nil, runner == nil, queuedAttempts == 0 else { return }
    while let caller = callers.removeFirst() {
      callers.setPhase(.resolved, of: caller)
      strand(caller)
    }
  }

  /// A queued task's caller was cancelled: it leaves the queue unless its attempt has started
  /// or it is resolved already. (A task cancelled before it queued is told so when it arrives.)
  mutating func cancel(_ caller: Caller, resolve: (Caller, Verdict) -> Void) {
    let phase = callers.phase(of: caller)
    guard phase == .queued || phase == .awaiting else { return }
    if phase == .queued { queuedAttempts -= 1 }
    callers.remove(caller)
    callers.setPhase(.resolved, of: caller)
    resolve(caller, .cancelled)
  }
}

extension FlightMachine: Equatable where Callers: Equatable, Caller: Equatable {}
extension FlightMachine: Hashable where Callers: Hashable, Caller: Hashable, Thread: Hashable {}
