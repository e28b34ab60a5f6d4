// The engine: once-cells whose attempts run in main context, and the threads that wait for them.
// This room owns the state word (`OnceCell.swift`), a gate's state machine
// (`GateMachine.swift`) and the gate that performs it with its callers (`Gate.swift`), each
// thread's record and parker (`ThreadRecord.swift`), what main context is (`MainContext.swift`),
// the board where waiting threads publish their waits (`WaitBoard.swift`), an `AsyncMainLazy`'s
// build and its machine (`AsyncBuild.swift`, `AsyncBuildMachine.swift`), the timer of callers
// that do not block (`StallTimer.swift`), and how an attempt enters the main actor's isolation.
// It calls `Platform/` (locks, the clock, thread ids, who holds the main queue) and `Reporting/`
// (names and crash messages), and knows nothing of the rooms above it. To whoever watches its
// waits it offers an observer interface (`WaitObserver.swift`: a wait outlived its grace period; a
// reported stall ended), which the API installs the deadlock detector as, and read-only views of
// its waits (`BlockingWait.swift`, `Gate+Watching.swift`) and of the board. The rooms above
// keep what they need per thread in untyped slots of a thread's record, and have queued attempts
// run by `MainQueueEngine.runQueuedAttempts(on:)`.
internal import Dispatch
internal import Synchronization
internal import _CMainOnceShims

/// The slow path of every API that runs work once on the main queue: who runs an attempt, who
/// waits, and how the end reaches every caller: it performs what the cell's state machine
/// (`GateMachine.swift`) decides, under the engine's lock (``OnceCell/withLock(_:)``).
///
/// A blocking first call, from `onceOnMain(token:)` to its return, goes through
/// `OnceOnMain.swift` (the call), `MainOnceToken.swift` (the token), `Engine/OnceCell.swift`
/// (the word), `Engine/Gate.swift` (the gate and its callers), `Engine/GateMachine.swift`
/// (the decisions), this file (performing them), `Engine/MainContext.swift` and
/// `Platform/QueueOwnership.swift` (whether the caller holds the main queue) and
/// `Engine/ThreadRecord.swift` (where a thread parks). The first such call in a process also
/// installs the deadlock detector as the engine's observer, from the token's cell
/// (`DetectorInstallation.swift`, ``install(observer:)``): two stores, and no line of the
/// detector. Line coverage of one such call from a worker under `dispatchMain()`, first use in
/// the process included, counts 16 files and 618 lines in a debug build, 597 in release (Swift
/// 6.3.1; the `DA:` lines with a count under `Sources/MainOnce/` of `llvm-cov export
/// -format=lcov`, the most of five runs; a few runs count 9 lines fewer): the rest are the
/// lock, the platform's clock and thread id, the wait board, labels and settings, and in a
/// debug build the engine's test counters, and no line of the deadlock detector, of the tracked
/// waits or of the per-object cells. A parked caller
/// publishes its wait on the `WaitBoard` (a store) and parks for `WaitBoard.gracePeriod`; only a
/// wait that outlives it tells the observer (`WaitObserver.waitOutlivedGracePeriod`), and only a
/// gate whose stall the observer reported tells it again when it ends
/// (`WaitObserver.reportedWaitEnded`).
///
/// A caller asks the cell for its phase under the engine's lock (``OnceCell/withLock(_:)``);
/// unless it is done, it queues its attempt and takes one of two roles. **Drive**, in main
/// context: run the queued attempts in arrival order until one succeeds or none is left (a hop
/// from main context would trap in libdispatch). **Wait**, elsewhere: park, suspend, or keep a
/// completion handler, after sending a hop (an async block on the main queue, which drives the
/// gate) unless someone runs it or a hop is on its way. Whoever finishes the gate resolves
/// every caller under the lock, then wakes them. A hop is never `main.sync`: nobody is stuck
/// inside one, so a gate finished some other way still releases every caller, and a late hop
/// finds nothing to do.
enum MainQueueEngine {
  // MARK: - Blocking callers

  private enum Step {
    case done
    case drive(Gate, first: Waiter?)
    case park
    /// A re-entrant call: the site of the call whose attempt runs, if its gate knows it.
    case reentrant(CallSite?)
  }

  /// Runs `attempt` for `cell` unless it is done, and returns once it is done or `attempt` has
  /// failed with its error, a `Failure`. Blocks outside main context.
  @inline(__always)
  static func run<Failure: Error>(
    _ cell: OnceCell, site: CallSite, throwing: Failure.Type, _ attempt: Attempt
  ) throws(Failure) {
    // The error came from this caller's own attempt, which throws `Failure`.
    if let error = run(cell, site: site, attempt) { throw error as! Failure }
  }

  /// Runs `attempt` for `cell` unless it is done, and returns once it is done (`nil`) or
  /// `attempt` has failed (its error). Blocks outside main context.
  static func run(_ cell: OnceCell, site: CallSite, _ attempt: Attempt) -> (any Error)? {
    switch resolve(cell, site: site, attempt) {
    case .done: return nil
    case .failed(let error): return error
    case .cancelled:
      Diagnostics.internalInconsistency("a blocking caller was resolved as cancelled")
    }
  }

  /// How ``run(_:site:_:)``'s call ended. The calling thread's record is used unretained.
  ///
  /// The attempt is queued only while this call waits for it, and every reference to it is
  /// dropped when this caller is answered (the gate lets go of it), before it returns:
  /// `withoutActuallyEscaping` checks exactly that.
  ///
  /// The record is unretained safely because the thread's key keeps its record alive while the
  /// thread runs, and the call ends before the thread does. Unretained, the record costs no retain
  /// and release: two atomic operations of a first call in main context. Said here and not in the
  /// body, where each comment line would count as a line of a first call's coverage (see
  /// ``MainQueueEngine``).
  private static func resolve(_ cell: OnceCell, site: CallSite, _ attempt: Attempt) -> Resolution {
    ThreadRecord.unmanaged(at: site)._withUnsafeGuaranteedRef { resolve(cell, site, attempt, $0) }
  }

  /// ``resolve(_:site:_:)`` on `thread`, the calling thread's record.
  private static func resolve(
    _ cell: OnceCell, _ site: CallSite, _ attempt: Attempt, _ thread: ThreadRecord
  ) -> Resolution {
    let drives = MainContext.isCurrent(on: thread)
    if drives {
      // Nobody calls: the attempt runs right here, with no gate and no caller record (and
      // without making the attempt escaping, which costs an allocation).
      if cell.startInPlaceRun(on: thread.id) {
        return runInPlace(cell, attempt, site: site, on: thread)
      }
      if cell.isRunInPlace(by: thread.id) { reenter(cell, site: site, runnerSite: nil, on: thread) }
    }
    return withoutActuallyEscaping(attempt) { attempt -> Resolution in
      let parker = thread.takeParker()
      defer { thread.returnParker(parker) }
      let waiter = thread.takeWaiter(
        site: site, label: cell.label,
        kind: drives ? .inPlace : .thread(ParkedThread(parker: parker, id: thread.id)),
        attempt: attempt, storage: cell.word)
      switch arriveBlocking(waiter, at: cell, on: thread, inMainContext: drives) {
      case .done:
        // Unused: the record's attempt is dropped, so that it keeps nothing of this call.
        waiter.dropUnqueuedAttempt()
        return .done
      case .reentrant(let runnerSite):
        reenter(cell, site: site, runnerSite: runnerSite, on: thread)
      case .drive(let gate, let first):
        drive(gate, from: first, on: thread)
        return waiter.answer!
      case .park:
        park(waiter, on: thread, parker: parker)
        return waiter.answer!
      }
    }
  }

  /// Queues a blocking caller or wait, `waiter`, on `cell`'s gate, and says what the thread
  /// does next. A blocking caller is never cancelled, and in main context no other thread runs
  /// the cell's attempts: either would be an inconsistency.
  private static func arriveBlocking(
    _ waiter: Waiter, at cell: OnceCell, on thread: ThreadRecord, inMainContext: Bool
  ) -> Step {
    transition { held -> (Step, Gate?, GateEffects<WaiterQueue>) in
      guard case .pending(let gate) = cell.phase(holding: held) else {
        return (.done, nil, GateEffects())
      }
      let (arrival, effects) = gate.arrive(
        waiter, on: thread.id, inMainContext: inMainContext, holding: held)
      switch arrival {
      case .reentrant: return (.reentrant(gate.runner(holding: held)!.site), gate, effects)
      case .drive(let first): return (.drive(gate, first: first), gate, effects)
      case .wait: return (.park, gate, effects)
      case .runByAnotherThread(let runner):
        Diagnostics.internalInconsistency(
          "\(thread.id) holds the main queue while \(runner) runs \(cell.label)")
      case .cancelled:
        Diagnostics.internalInconsistency("a blocking caller arrived cancelled")
      }
    }
  }

  // MARK: - Waiting without an attempt

  /// Blocks until `cell` is done, bringing no attempt: it never initializes. Outside main
  /// context the thread parks, as a blocking caller does. In main context, where no hop can run
  /// while it blocks, it runs the attempts queued already, then serves the main queue until
  /// `cell` is done (``serve(until:on:parker:)``).
  static func wait(for cell: OnceCell, site: CallSite) {
    let thread = ThreadRecord.current(at: site)
    let inMainContext = MainContext.isCurrent(on: thread)
    // A parker of its own: a serving wait is also woken by hops, and a wake that comes after
    // it has returned must not reach the thread's next wait.
    let parker = Parker()
    let waiter = Waiter(
      waitingAt: site, label: cell.label,
      kind: .thread(ParkedThread(parker: parker, id: thread.id)),
      servesMainQueue: inMainContext, storage: cell.word)
    switch arriveBlocking(waiter, at: cell, on: thread, inMainContext: inMainContext) {
    case .done: return
    case .reentrant(let runnerSite):
      reenter(cell, site: site, runnerSite: runnerSite, on: thread, waits: true)
    case .park:
      // A wait never sends a hop: it brings no attempt for one to run.
      park(waiter, on: thread, parker: parker)
    case .drive(let gate, let first):
      drive(gate, from: first, on: thread)
      serve(until: waiter, on: thread, parker: parker)
    }
  }

  /// Serves the main queue from a wait that blocks it, until `waiter` is resolved: runs the
  /// attempts queued for the main queue, of every cell, whose hops cannot run meanwhile, and
  /// parks between them. Each attempt queued while it waits wakes it
  /// (``Gate/serve(with:holding:)``); a hop, when it runs later, finds nothing to do. A wait
  /// nested in an attempt that an outer one runs wakes the outer one when it ends: a wake meant
  /// for the outer wait may have reached it.
  private static func serve(until waiter: Waiter, on thread: ThreadRecord, parker: Parker) {
    let outer = OnceCell.withLock {
      Gate.serve(with: ParkedThread(parker: parker, id: thread.id), holding: $0)
    }
    defer {
      _ = OnceCell.withLock { Gate.serve(with: outer, holding: $0) }
      outer?.parker.unpark()
    }
    // Its grace period and its stall count from here, however often it wakes to serve.
    let since = (
      Platform.monotonicNanoseconds(), DispatchTime.now() + .nanoseconds(Int(WaitBoard.gracePeriod))
    )
    while !waiter.isResolved.load(ordering: .acquiring) {
      // An attempt queued from here on wakes the park below, if this finds nothing.
      runQueuedAttempts(on: thread)
      if waiter.isResolved.load(ordering: .acquiring) { return }
      park(waiter, on: thread, parker: parker, since: since)
    }
  }

  // MARK: - Callers that do not block

  /// Queues `attempt` for `cell` and suspends until the cell is done, the attempt has run, or the
  /// task is cancelled before the attempt started. The caller is not in main context. With no
  /// `attempt`, a wait that never initializes: it suspends until the cell is done or the task
  /// is cancelled.
  ///
  /// A done cell returns, cancelled or not: the phase is asked before the cancellation.
  static func suspend(_ cell: OnceCell, site: CallSite, attempt: Attempt?) async throws {
    let waiter =
      if let attempt {
        Waiter(
          site: site, label: cell.label, kind: .task(nil), attempt: attempt, storage: cell.word)
      } else {
        Waiter(
          waitingAt: site, label: cell.label, kind: .task(nil), servesMainQueue: false,
          storage: cell.word)
      }
    let resolution = await withTaskCancellationHandler {
      await withUnsafeContinuation { continuation in
        let now = transition { held -> (Resolution?, Gate?, GateEffects<WaiterQueue>) in
          guard case .pending(let gate) = cell.phase(holding: held) else {
            return (.done, nil, GateEffects())
          }
          waiter.suspend(with: continuation, holding: held)
          // A task cancelled before this found nothing to take out of the queue: it never
          // queues, and the effects answer it. One cancelled after this finds it queued (the
          // handler takes the lock).
          let (arrival, effects) = gate.arrive(
            waiter, on: nil, inMainContext: false, isCancelled: Task.isCancelled, timed: true,
            holding: held)
          switch arrival {
          case .cancelled, .wait: return (nil, gate, effects)
          case .reentrant, .drive, .runByAnotherThread:
            Diagnostics.internalInconsistency("a task was given the main queue's role")
          }
        }
        if let now { continuation.resume(returning: now) }
      }
    } onCancel: {
      transition { held -> (Void, Gate?, GateEffects<WaiterQueue>) in
        guard let gate = waiter.gate(holding: held) else { return ((), nil, GateEffects()) }
        return ((), gate, gate.cancel(waiter, holding: held))
      }
    }
    switch resolution {
    case .done: return
    case .failed(let error): throw error
    case .cancelled: throw CancellationError()
    }
  }

  /// Suspends until `cell` is done or the task is cancelled, bringing no attempt: a wait that
  /// never initializes.
  static func suspend(waitingFor cell: OnceCell, site: CallSite) async throws(CancellationError) {
    do {
      try await suspend(cell, site: site, attempt: nil)
    } catch is CancellationError {
      throw CancellationError()
    } catch {
      Diagnostics.internalInconsistency("a wait without an attempt was told one failed")
    }
  }

  /// Queues a completion-form caller. Returns `false`, without queueing it, if the cell is done.
  static func enqueue(_ waiter: Waiter, for cell: OnceCell) -> Bool {
    transition { held -> (Bool, Gate?, GateEffects<WaiterQueue>) in
      guard case .pending(let gate) = cell.phase(holding: held) else {
        return (false, nil, GateEffects())
      }
      let (arrival, effects) = gate.arrive(
        waiter, on: nil, inMainContext: false, timed: true, holding: held)
      guard case .wait = arrival else {
        Diagnostics.internalInconsistency("a completion handler was given the main queue's role")
      }
      return (true, gate, effects)
    }
  }

  // MARK: - Waiting

  /// Parks the calling thread until `wait`, a once-cell caller's, is resolved (its one
  /// unpark): published on the `WaitBoard`, for `WaitBoard.gracePeriod` first, then watched by the
  /// observer, if one is installed.
  ///
  /// A wait that parks again and again (one that serves the main queue) passes when it began,
  /// `since`, and the end of its grace period: its grace period and its stall are counted from
  /// then.
  static func park(
    _ wait: some BlockingWait, on thread: ThreadRecord, parker: Parker,
    since: (nanoseconds: UInt64, gracePeriodEnd: DispatchTime)? = nil
  ) {
    #if DEBUG || MAINONCE_INSTRUMENTATION
      EngineCounters.noteParked()
    #endif
    let previous = WaitBoard.publish(wait, on: thread)
    if !parker.park(
      until: since?.gracePeriodEnd ?? .now() + .nanoseconds(Int(WaitBoard.gracePeriod)))
    {
      if let observer {
        observer.waitOutlivedGracePeriod(
          wait,
          since: since?.nanoseconds ?? Platform.monotonicNanoseconds() &- WaitBoard.gracePeriod
        ) { parker.park(until: $0) }
      } else {
        _ = parker.park(until: nil)
      }
    }
    WaitBoard.withdraw(previous, on: thread)
    #if DEBUG || MAINONCE_INSTRUMENTATION
      EngineCounters.noteWoke()
    #endif
  }

  // MARK: - The observer

  /// Whom the engine tells about a wait that outlived its grace period, and about the end of a
  /// stall it reported (see `WaitObserver`): `nil` until installed, once, by the API's first slow
  /// path (`DetectorInstallation.swift`), before any wait of the engine's can outlive its grace
  /// period. Read only then, with an acquiring load.
  static var observer: (any WaitObserver.Type)? {
    isObserved.load(ordering: .acquiring) ? installedObserver : nil
  }

  /// Installs `observer`. Once per process: only a global's initializer calls it.
  static func install(observer: any WaitObserver.Type) {
    installedObserver = observer
    isObserved.store(true, ordering: .releasing)
  }

  // This is safe because it is written once, by `install(observer:)`, before the releasing
  // store that sets `isObserved`, and read only after an acquiring load of `isObserved` finds
  // it set.
  nonisolated(unsafe) private static var installedObserver: (any WaitObserver.Type)?
  private static let isObserved = Atomic(false)

  /// How often the timer of a subject's callers that do not block looks at it, after its first
  /// look a grace period after it started (`TimedSubject.startStallTimer()`).
  static let timerInterval: UInt64 = 100_000_000

  // MARK: - Running the queue in main context

  /// Sends the hop that a gate's transition asked for, after the lock is released (a main
  /// thread that picks it up at once must not find the lock held): `dispatch_async_f` with the
  /// gate as its context, so that no block is allocated and copied on a first call's path.
  static func sendHop(for gate: Gate) {
    #if DEBUG || MAINONCE_INSTRUMENTATION
      EngineCounters.noteHop()
    #endif
    mainonce_main_queue_async(Unmanaged.passRetained(gate).toOpaque()) { context in
      let gate = Unmanaged<Gate>.fromOpaque(context!).takeRetainedValue()
      MainQueueEngine.driveUnlessDriven(gate, on: .current, isHop: true)
    }
  }

  /// Runs, in place, every queued attempt whose hop is on its way and that nobody runs: for
  /// main-queue code that waits, and so holds the main queue, where no hop can run meanwhile: a
  /// wait without an attempt in main context (``serve(until:on:parker:)``), and a tracked wait
  /// under the `service` policy (`TrackedWaits/`). The caller holds the main queue.
  static func runQueuedAttempts(on thread: ThreadRecord) {
    let gates = OnceCell.withLock { held in
      Gate.awaitingHop(holding: held).filter {
        $0.runner(holding: held) == nil && $0.outcome(holding: held) == nil
      }
    }
    for gate in gates {
      driveUnlessDriven(gate, on: thread, isHop: false)
    }
  }

  /// Drives `gate` here, in main context, unless it has finished or is driven already: the
  /// body of a hop (`isHop`: it clears the hop's mark), and a main-queue wait that serves
  /// initializers (``runQueuedAttempts(on:)``). Checks, in release builds too, that the caller holds the main queue: an
  /// attempt never starts anywhere else. The first hop confirms what the main queue's lock word
  /// means (``QueueOwnership/confirmOwnerOfMainQueue(is:)``) before it is relied on here.
  private static func driveUnlessDriven(
    _ gate: Gate, on thread: ThreadRecord, isHop: Bool
  ) {
    if isHop { QueueOwnership.confirmOwnerOfMainQueue(is: thread.id) }
    guard MainContext.isCurrent(on: thread) else {
      Diagnostics.internalInconsistency(
        "\(thread.id) would run \(gate.label) without holding the main queue")
    }
    let step = transition { held in
      let (step, effects) = gate.mainQueueReached(on: thread.id, isHop: isHop, holding: held)
      return (step, gate, effects)
    }
    switch step {
    case .drive(let first): drive(gate, from: first, on: thread)
    case .runByAnotherThread(let runner):
      Diagnostics.internalInconsistency(
        "\(thread.id) holds the main queue while \(runner) runs \(gate.label)")
    }
  }

  /// Stops a re-entrant call at `site` (a `wait()` if `waits`): the attempt that runs on this
  /// thread is one it runs in place, named by its call, or one it runs for a queued caller, at
  /// `runnerSite`.
  private static func reenter(
    _ cell: OnceCell, site: CallSite, runnerSite: CallSite?, on thread: ThreadRecord,
    waits: Bool = false
  ) -> Never {
    var run = thread.innermostInPlaceRun
    while let outer = run, outer.pointee.word != UnsafeRawPointer(cell.word) {
      run = outer.pointee.outer
    }
    let first = run?.pointee.site
    Diagnostics.reentrance(
      cell.label, firstCall: first ?? runnerSite!, secondCall: site, waits: waits)
  }

  /// Runs `attempt` here, in main context, for a cell that had no gate: the first call in
  /// main context while nobody else calls, which allocates nothing and reads no clock. The word
  /// marks the run (``OnceCell/startInPlaceRun(on:)``) until it ends; a caller that arrives
  /// meanwhile attaches a gate that takes the run over, and this thread then drives the
  /// gate's queue, as main-context code does.
  ///
  /// The run is linked into the thread's record (``ThreadRecord/innermostInPlaceRun``) from this
  /// stack frame, only while the attempt runs: the pointer names it no longer than
  /// `withUnsafePointer` promises.
  private static func runInPlace(
    _ cell: OnceCell, _ attempt: Attempt, site: CallSite, on thread: ThreadRecord
  ) -> Resolution {
    let run = InPlaceRun(
      word: UnsafeRawPointer(cell.word), site: site, outer: thread.innermostInPlaceRun)
    let result = withUnsafePointer(to: run) { run in
      thread.innermostInPlaceRun = run
      defer { thread.innermostInPlaceRun = run.pointee.outer }
      return runInMainContext(attempt, on: thread)
    }
    if !cell.endInPlaceRun(by: thread.id, with: result) {
      let (gate, standIn) = OnceCell.withLock { cell.takenOverRun(of: thread.id, holding: $0) }
      drive(gate, from: settle(gate, standIn, with: result, on: thread), on: thread)
    }
    switch result {
    case .success: return .done
    case .failure(let error): return .failed(error)
    }
  }

  /// Runs the gate's queued attempts in main context, in arrival order, from `first` (started
  /// with ``Gate/startNextAttempt(on:)`` under the caller's lock), until one succeeds or none
  /// is left.
  ///
  /// Main-context code drives the whole queue, also after its own attempt failed: it holds the
  /// main queue, so no hop could run the rest until it returns. It reads each running waiter's
  /// attempt without the lock: only the runner reads it, and it is let go only once the waiter
  /// is answered, after its attempt returned.
  static func drive(_ gate: Gate, from first: Waiter?, on thread: ThreadRecord) {
    var next = first
    while let owner = next {
      next = settle(gate, owner, with: runInMainContext(owner.attempt!, on: thread), on: thread)
    }
  }

  /// Records the end of `owner`'s attempt and starts the next, under one lock, and performs what
  /// that decides (the answers, the publish, the observer told, the wakes). Returns the caller
  /// whose attempt runs next, if any.
  private static func settle(
    _ gate: Gate, _ owner: Waiter, with result: Result<UInt, any Error>,
    on thread: ThreadRecord
  ) -> Waiter? {
    transition { held in
      let (next, effects) = gate.settle(owner, with: result, on: thread.id, holding: held)
      return (next, gate, effects)
    }
  }

  // MARK: - Performing what the gate decides

  /// Makes one transition of a gate under the engine's lock (`body`: the role it decides for
  /// the caller, the gate, if there is one, and the effects), performs its effects there and
  /// after the lock (see `GateMachine.swift`), with the gate as the place where they are
  /// performed, and returns the role. A transition that found no gate has no effects.
  static func transition<Role>(
    _ body: (borrowing OnceCell.LockHeld) -> (Role, Gate?, GateEffects<WaiterQueue>)
  ) -> Role {
    var shell: Gate?
    let (role, effects) = OnceCell.withLock { held -> (Role, GateEffects<WaiterQueue>) in
      let (role, gate, effects) = body(held)
      shell = gate
      if shell != nil { effects.performUnderLock(in: &shell!, holding: held) }
      return (role, effects)
    }
    if shell != nil { effects.performAfterLock(in: &shell!) }
    return role
  }

  /// Runs `attempt` in main context, on `thread`, which holds the main queue.
  private static func runInMainContext(_ attempt: Attempt, on thread: ThreadRecord) -> Result<
    UInt, any Error
  > {
    thread.mainContextDepth += 1
    defer { thread.mainContextDepth -= 1 }
    return attempt()
  }

  /// Calls `body`, catching its typed error as `any Error`: a concrete `Result` spares the slow
  /// path a `Result<UInt, Failure>`, whose metadata generic code instantiates at run time.
  static func erase<Failure: Error>(_ body: () throws(Failure) -> UInt) -> Result<
    UInt, any Error
  > {
    do {
      return .success(try body())
    } catch {
      return .failure(error)
    }
  }
}

// MARK: - Counters for MainOnce's own tests

#if DEBUG || MAINONCE_INSTRUMENTATION
  /// What the engine counts for MainOnce's own tests, which read it through
  /// `ForTests/Instrumentation.swift`: only in debug builds and in release builds for tests
  /// (`-DMAINONCE_INSTRUMENTATION`), as that file says. Elsewhere neither the counters nor the
  /// calls that count exist.
  enum EngineCounters {
    /// Hops sent to the main queue: each is one main-queue work item.
    static let hops = Atomic(0)
    /// Threads parked now in a wait of MainOnce's own, from the moment the wait is published
    /// (any hop it needs is on its way) until the thread wakes.
    static let parked = Atomic(0)
    /// Every gate and `AsyncMainLazy` build whose callers that do not block started its
    /// timer, weakly; registered only in a test runner (`Platform.isTestRunner`).
    static let subjects = Locked<[ObjectIdentifier: WeakSubject]>([:])

    struct WeakSubject {
      weak var subject: (any StallSubject)?
    }

    static func noteHop() { hops.add(1, ordering: .relaxed) }
    static func noteParked() { parked.add(1, ordering: .releasing) }
    static func noteWoke() { parked.subtract(1, ordering: .relaxed) }

    static func noteSubject(_ subject: any StallSubject) {
      guard Platform.isTestRunner else { return }
      subjects.withLock { subjects in
        subjects = subjects.filter { $0.value.subject != nil }
        subjects[ObjectIdentifier(subject)] = WeakSubject(subject: subject)
      }
    }
  }
#endif
