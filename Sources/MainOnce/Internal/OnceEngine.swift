internal import Dispatch

/// The slow path of every MainOnce API: who runs an initializer, who waits, and how the end of a
/// flight reaches every caller.
///
/// A caller arrives here only when the fast path found its cell unpublished. Under
/// ``Registry/shared``'s lock it joins the cell's ``Flight`` (see ``Cell/flight(policy:)``),
/// and takes one of these roles:
///
/// - **Drive** (main-queue policy, in main context): it queues its initializer and runs the
///   queue itself, in arrival order, until one initializer succeeds or none is left.
/// - **Run** (calling-thread policy, nobody running): it runs its own body right there.
/// - **Wait** (anything else): it queues and waits: a thread parks, a task suspends, a
///   completion handler is kept. Under the main-queue policy, a hop to the main queue is sent
///   if no runner or hop is on its way already; the hop drives the queue there.
///
/// One invariant makes this work, enforced in ``claimHop(for:)`` and ``drive(_:from:on:)``:
/// *a main-queue flight with queued callers always has a runner or a hop on its way.* The hop
/// is `DispatchQueue.main.async`, never `sync`: a caller is never stuck inside a hop, so when
/// the cell is done (by whoever finishes it: a runner in place, another caller's hop) every
/// caller is released, and a hop that arrives after that finds its flight finished and does
/// nothing. When an initializer succeeds, ``Registry/finish(_:attemptOf:with:)`` marks the
/// flight finished and resolves every waiter under one lock; each caller that borrows the cell
/// publishes it before it returns (``Cell/settle()``).
enum OnceEngine {
  /// Where initializers run.
  enum Policy {
    /// In main context: callers elsewhere hop to the main queue and wait.
    case mainQueue
    /// On the calling thread: concurrent callers wait for the one that runs.
    case callingThread
    /// In a main-actor task of its own, which the first caller starts (``AsyncMainLazy``):
    /// callers bring no initializer; they only wait.
    case mainActorTask
  }

  // MARK: - Blocking callers

  private enum Step {
    case resolved(Resolution)
    case drive(Flight, first: Waiter?)
    case run(Flight)
    case park(Flight, Parking, previous: BlockedWait?, cycle: Cycle?, hop: Bool)
    case reentrant(Runner)
  }

  /// Runs `body` for `cell` unless the cell is done, and returns once it is done or `body` has
  /// thrown. Blocks outside main context.
  static func run<Failure: Error>(
    _ cell: Cell,
    policy: Policy,
    site: CallSite,
    _ body: () throws(Failure) -> UInt
  ) throws(Failure) {
    let thread = ThreadRecord.current
    let drives = policy == .mainQueue && MainContext.isCurrent(on: thread)
    let cycleResponse = DeadlockDetection.cycleResponse
    // The initializer is queued in the flight only while this call waits for it, and every
    // reference to it is dropped before this call is told its resolution (see `runAttempt`
    // and `Deliveries.resolve`), so it does not outlive this call: `withoutActuallyEscaping`
    // checks exactly that.
    let resolution = withoutActuallyEscaping(body) { body -> Resolution in
      let parking = thread.takeParking()
      defer { thread.returnParking(parking) }
      let waiter = Waiter(
        site: site, thread: thread.id, attempt: policy == .mainQueue ? { erase(body) } : nil,
        delivery: .inPlace)
      var step = Registry.shared.withLock { registry -> Step in
        guard let flight = cell.flight(policy: policy) else { return .resolved(.done) }
        if let runner = flight.runner, runner.thread == thread.id { return .reentrant(runner) }
        if drives {
          guard flight.runner == nil else {
            Diagnostics.internalInconsistency(
              "\(thread.id) holds the main queue while \(flight.runner!.thread) runs \(cell.label)")
          }
          registry.enqueue(waiter, in: flight)
          return .drive(flight, first: registry.startNextAttempt(of: flight, on: thread.id))
        }
        if policy == .callingThread && flight.runner == nil {
          flight.runner = Runner(thread: thread.id, site: site)
          return .run(flight)
        }
        waiter.delivery = .parked(parking)
        registry.enqueue(waiter, in: flight)
        let (previous, cycle) = registry.beginWait(
          for: flight, as: waiter, on: thread.id, response: cycleResponse)
        return .park(flight, parking, previous: previous, cycle: cycle, hop: claimHop(for: flight))
      }
      while true {
        switch step {
        case .resolved(let resolution):
          return resolution
        case .reentrant(let runner):
          Diagnostics.reentrance(cell.label, firstCall: runner.site, secondCall: site)
        case .drive(let flight, let first):
          drive(flight, from: first, on: thread)
          return waiter.resolution!
        case .run(let flight):
          let result = erase(body)
          Registry.shared.withLock { $0.finish(flight, attemptOf: waiter, with: result) }.deliver()
          return waiter.resolution!
        case .park(let flight, let parking, let previous, let cycle, let hop):
          if hop { sendHop(for: flight) }
          cycle?.handle(at: site)
          parking.wait()
          // The wait ends, and the cell is published if it is done, under one lock.
          Registry.shared.withLock { registry in
            registry.endWait(on: thread.id, restoring: previous)
            if case .done = waiter.resolution { _ = Cell.publishIfFinished(cell.storage) }
          }
          // Calling-thread policy: the body that ran failed, and this caller is the runner now.
          // Nothing else refers to the waiter: it is in no queue.
          guard case .yourTurn = waiter.resolution! else { return waiter.resolution! }
          waiter.delivery = .inPlace
          step = .run(flight)
        }
      }
    }
    switch resolution {
    case .done:
      cell.settle()
    case .failed(let error):
      // The error came from this caller's own initializer, which throws `Failure`.
      throw error as! Failure
    case .yourTurn, .cancelled:
      Diagnostics.internalInconsistency("a blocking caller was resolved with \(resolution)")
    }
  }

  // MARK: - Callers that do not block

  /// Queues `attempt` for `cell` and suspends until the cell is done, the attempt has run, or
  /// the task is cancelled before the attempt started. Never blocks a thread. The caller must
  /// not be in main context (it would wait for itself).
  static func suspend(_ cell: Cell, site: CallSite, attempt: @escaping Attempt) async throws {
    try await suspend(
      Waiter(site: site, attempt: attempt, delivery: .task(nil)), for: cell, policy: .mainQueue,
      start: sendHop)
  }

  /// Queues `waiter`, a task's, in `cell`'s flight and suspends until it is resolved: the cell
  /// is done (then this publishes it), its attempt has run, or the task was cancelled first
  /// (then it is withdrawn, and resolved as cancelled, wherever it is: not queued yet, queued,
  /// or resolved already). Throws the error of the caller's own attempt, or
  /// `CancellationError`.
  ///
  /// A task that awaits the flight its own `AsyncMainLazy` build runs stops with a message
  /// instead. `start` gets the flight after the lock is released when this caller has claimed
  /// its start (see ``claimHop(for:)``): it sends the hop, or starts the `AsyncMainLazy` build.
  static func suspend(
    _ waiter: Waiter, for cell: Cell, policy: Policy, start: (Flight) -> Void
  ) async throws {
    // This is safe because the task reference is only compared, never used to reach the task,
    // and this task is alive while it is compared: it is the caller's own.
    let task = withUnsafeCurrentTask { $0 }
    let resolution = await withTaskCancellationHandler {
      await withUnsafeContinuation { continuation in
        let (now, starts) = Registry.shared.withLock { registry -> (Resolution?, Flight?) in
          // Cancelled before it got here: `withdraw` has resolved it already.
          if let resolution = waiter.resolution { return (resolution, nil) }
          guard let flight = cell.flight(policy: policy) else { return (.done, nil) }
          if let runner = flight.runner, let running = runner.task, running == task {
            Diagnostics.reentrance(cell.label, firstCall: runner.site, secondCall: waiter.site)
          }
          waiter.delivery = .task(continuation)
          registry.enqueue(waiter, in: flight)
          return (nil, claimHop(for: flight) ? flight : nil)
        }
        if let starts { start(starts) }
        if let now { continuation.resume(returning: now) }
      }
    } onCancel: {
      Registry.shared.withLock { $0.withdraw(waiter) }.deliver()
    }
    try resolution.endAsyncWait()
    cell.settle()
  }

  /// Queues a completion-form caller. Returns `false`, without queueing it, if the cell is done.
  static func enqueue(_ waiter: Waiter, for cell: Cell) -> Bool {
    let (queued, hop) = Registry.shared.withLock { registry -> (Bool, Flight?) in
      guard let flight = cell.flight(policy: .mainQueue) else { return (false, nil) }
      registry.enqueue(waiter, in: flight)
      return (true, claimHop(for: flight) ? flight : nil)
    }
    if let hop { sendHop(for: hop) }
    return queued
  }

  // MARK: - Running the queue in main context

  /// Whether a hop must be sent to drive `flight` on the main queue (or, for an
  /// ``AsyncMainLazy``, its build started): no runner and no hop will get to its queue
  /// otherwise. Marks the hop as on its way; send it with ``sendHop(for:)`` once the lock is
  /// released (a worker that picks it up at once must not find the lock held). Call under the
  /// lock, after queueing a caller.
  private static func claimHop(for flight: Flight) -> Bool {
    guard flight.policy != .callingThread, flight.runner == nil, !flight.hopIsOnItsWay else {
      return false
    }
    flight.hopIsOnItsWay = true
    return true
  }

  /// Sends the hop claimed with ``claimHop(for:)``.
  private static func sendHop(for flight: Flight) {
    Instrumentation.noteHop()
    DispatchQueue.main.async { hopArrived(flight) }
  }

  /// The body of a hop: drives the flight unless it is finished, has nobody left, or is being
  /// driven already.
  private static func hopArrived(_ flight: Flight) {
    let thread = ThreadRecord.current
    let first = Registry.shared.withLock { registry -> Waiter? in
      flight.hopIsOnItsWay = false
      if let runner = flight.runner {
        // An initializer on this thread served the hop from a nested run loop; its caller
        // goes on driving the queue when it returns.
        guard runner.thread == thread.id else {
          Diagnostics.internalInconsistency(
            "\(thread.id) holds the main queue while \(runner.thread) runs \(flight.label)")
        }
        return nil
      }
      return registry.startNextAttempt(of: flight, on: thread.id)
    }
    drive(flight, from: first, on: thread)
  }

  /// Runs the flight's queued initializers in main context, in arrival order, until one
  /// succeeds or none is left, from `first`, which the caller started with
  /// ``Registry/startNextAttempt(of:on:)`` under its own lock.
  ///
  /// A caller in main context drives the whole queue, also after its own initializer failed:
  /// it holds the main queue, so a hop could not run the rest until it returns, and it may go
  /// on to wait for one of those callers. Each attempt's end and the start of the next share
  /// one lock, so that nothing is left to do after the last delivery.
  static func drive(_ flight: Flight, from first: Waiter?, on thread: ThreadRecord) {
    var next = first
    while let owner = next {
      let result = runAttempt(of: owner, on: thread)
      let deliveries: Deliveries
      (deliveries, next) = Registry.shared.withLock { registry in
        (
          registry.finish(flight, attemptOf: owner, with: result),
          registry.startNextAttempt(of: flight, on: thread.id)
        )
      }
      deliveries.deliver()
    }
  }

  /// Runs `owner`'s initializer in main context. The initializer is a local of this function,
  /// so this function's reference to it is gone before the owner is told the result.
  private static func runAttempt(of owner: Waiter, on thread: ThreadRecord) -> Result<
    UInt, any Error
  > {
    // This is safe without the lock: only the runner reads a running waiter's initializer, and
    // it is dropped (under the lock) only when the waiter is resolved, after this returns.
    let attempt = owner.attempt!
    thread.mainContextDepth += 1
    defer { thread.mainContextDepth -= 1 }
    return attempt()
  }

  // MARK: - Typed errors

  /// Calls `body`, catching its typed error as `any Error`.
  ///
  /// Catching straight into this concrete `Result` keeps the slow path from building a
  /// `Result<UInt, Failure>`: in code generic over `Failure` its metadata is instantiated at run
  /// time, which cost about a quarter of a first call.
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

extension Registry {
  /// Starts the first queued initializer: its owner, now running; `nil`, and the flight
  /// without a runner, when none is left or the flight has finished.
  mutating func startNextAttempt(of flight: Flight, on thread: ThreadID) -> Waiter? {
    guard flight.outcome == nil, let owner = flight.queue.first else {
      flight.runner = nil
      retireIfIdle(flight)
      return nil
    }
    guard owner.attempt != nil, !owner.isRunning else {
      Diagnostics.internalInconsistency(
        "the first caller queued for \(flight.label) has no initializer to run")
    }
    owner.isRunning = true
    flight.runner = Runner(thread: thread, site: owner.site)
    return owner
  }

  /// Records the end of the initializer that `owner` brought. On success the flight is
  /// finished and every waiter is resolved as done; on failure the error goes to `owner`
  /// alone, and under the calling-thread policy the first waiter becomes the runner (under the
  /// main-queue policy the runner goes on with the queue itself).
  mutating func finish(
    _ flight: Flight, attemptOf owner: Waiter, with result: Result<UInt, any Error>
  ) -> Deliveries {
    var deliveries = Deliveries()
    flight.dequeue(owner)
    switch result {
    case .success(let value):
      flight.outcome = value
      flight.runner = nil
      deliveries.resolve(owner, .done)
      for waiter in flight.queue { deliveries.resolve(waiter, .done) }
      flight.queue.removeAll()
    case .failure(let error):
      deliveries.resolve(owner, .failed(error))
      if flight.policy == .callingThread {
        flight.runner = nil
        if !flight.queue.isEmpty {
          let next = flight.queue.removeFirst()
          flight.runner = Runner(thread: next.thread!, site: next.site)
          deliveries.resolve(next, .yourTurn)
        }
      }
    }
    retireIfIdle(flight)
    deliveries.endOfStall = endOfStall(flight)
    return deliveries
  }

  /// Withdraws an async waiter whose task was cancelled, unless its initializer has started
  /// or it is resolved already. A waiter that has not been queued yet is resolved as cancelled
  /// right away; the task finds that when it gets to queue it.
  mutating func withdraw(_ waiter: Waiter) -> Deliveries {
    var deliveries = Deliveries()
    guard waiter.resolution == nil, !waiter.isRunning else { return deliveries }
    if let flight = waiter.flight {
      flight.dequeue(waiter)
      retireIfIdle(flight)
      deliveries.endOfStall = endOfStall(flight)
    }
    deliveries.resolve(waiter, .cancelled)
    return deliveries
  }
}
