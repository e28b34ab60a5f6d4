internal import Dispatch

/// The slow path shared by every MainOnce API: who runs an initializer, who waits, and how a
/// failed attempt hands over to the next caller.
///
/// All bookkeeping sits in the ``Registry`` under one lock, so that the deadlock detector sees
/// one consistent wait-for graph. Nothing here is on the fast path: a done cell is answered by one
/// load in the caller before any of this runs.
///
/// A cell that is not done and has a call in progress has a ``Flight``. Callers that cannot run
/// their initializer right away queue up in it as ``Waiter``s, each with its own initializer
/// (an *attempt*). Under the main-queue policy, whoever holds the main queue runs attempts in
/// arrival order until one succeeds; each failed attempt's error goes back to the caller it
/// belongs to. So the first success ends the flight, no waiter is ever dropped, and an error is
/// only ever seen by the caller whose initializer threw it.
enum OnceEngine {
  /// Where initializers run.
  enum Policy {
    /// In main context: callers elsewhere hop to the main queue and wait.
    case mainQueue
    /// On the calling thread: concurrent callers wait for the one that runs.
    case callingThread
  }

  /// Runs `body` once for `cell`, blocking the calling thread until the cell is done or `body`
  /// has thrown.
  static func run<Failure: Error>(
    _ cell: OnceCell,
    policy: Policy,
    site: CallSite,
    _ body: () throws(Failure) -> UInt
  ) throws(Failure) {
    let thread = ThreadRecord.current
    while true {
      let finished: Bool
      if policy == .callingThread || MainContext.isCurrent(on: thread) {
        finished = try runHere(cell, policy: policy, site: site, thread: thread, body)
      } else {
        finished = try runOnMainQueue(cell, site: site, thread: thread, body)
      }
      if finished { return }
    }
  }

  /// Queues an attempt that does not block a thread (async and completion callers). Returns
  /// `false` if the cell is already done; `waiter` is then not queued.
  static func enqueue(_ waiter: Waiter, for cell: OnceCell) -> Bool {
    Registry.shared.withLock { registry in
      if cell.isDone { return false }
      let flight = registry.flight(for: cell)
      flight.waiters.append(waiter)
      if flight.runner == nil && flight.pendingHops == 0 {
        registry.scheduleHop(for: flight)
      }
      return true
    }
  }

  /// Withdraws a waiter that has not started running; returns whether it was withdrawn.
  static func withdraw(_ waiter: Waiter, from cell: OnceCell) -> Bool {
    Registry.shared.withLock { registry in
      guard waiter.attempt != nil, let flight = registry.flights[cell.key],
        let index = flight.waiters.firstIndex(where: { $0 === waiter })
      else { return false }
      flight.waiters.remove(at: index)
      waiter.attempt = nil
      registry.retireIfIdle(flight)
      return true
    }
  }

  // MARK: - Running in place

  private enum InPlaceDecision {
    case done
    case run(Flight)
    case wait(Parking, DeadlockReport?)
    case reentrant(Runner)
  }

  /// The caller can run its initializer where it is: it holds the main queue, or the policy
  /// runs initializers on the calling thread. Returns `false` to go around again.
  private static func runHere<Failure: Error>(
    _ cell: OnceCell,
    policy: Policy,
    site: CallSite,
    thread: ThreadRecord,
    _ body: () throws(Failure) -> UInt
  ) throws(Failure) -> Bool {
    let detection = DeadlockDetection.settings.withLock { $0 }
    let decision = Registry.shared.withLock { registry -> InPlaceDecision in
      if cell.isDone { return .done }
      let flight = registry.flight(for: cell)
      guard let runner = flight.runner else {
        flight.runner = Runner(thread: thread.id, site: site)
        return .run(flight)
      }
      if runner.thread == thread.id { return .reentrant(runner) }
      guard policy == .callingThread else {
        Diagnostics.internalInconsistency(
          "\(thread.id) holds the main queue while \(runner.thread) runs \(cell.label)")
      }
      let parking = Parking()
      flight.waiters.append(Waiter(site: site, thread: thread.id, attempt: nil, parking: parking))
      let cycle = registry.beginWait(for: cell, site: site, on: thread.id, detection: detection)
      return .wait(parking, cycle)
    }
    switch decision {
    case .done:
      return true
    case .reentrant(let runner):
      Diagnostics.reentrance(cell.label, firstCall: runner.site, secondCall: site)
    case .wait(let parking, let cycle):
      cycle?.deliver(at: site)
      let resolution = parking.wait()
      DeadlockDetection.endWait(on: thread.id)
      switch resolution {
      case .done: return true
      case .retry: return false
      case .ran, .cancelled:
        Diagnostics.internalInconsistency("a waiter without an initializer was run or cancelled")
      }
    case .run(let flight):
      let result = invoke(body, on: thread)
      let deliveries = Registry.shared.withLock { registry in
        registry.complete(flight, with: result.mapError { $0 }, ranFor: nil, policy: policy)
      }
      deliveries.deliver()
      _ = try result.get()
      return true
    }
  }

  // MARK: - Hopping to the main queue

  /// The caller does not hold the main queue: queue its initializer, make sure a hop to the main
  /// queue is on its way, and block until it has been resolved.
  private static func runOnMainQueue<Failure: Error>(
    _ cell: OnceCell,
    site: CallSite,
    thread: ThreadRecord,
    _ body: () throws(Failure) -> UInt
  ) throws(Failure) -> Bool {
    // The initializer is stored in the flight only while this thread is parked, and every
    // reference to it is dropped before the parking is signalled (see `runNext`), so it does not
    // outlive this call: `withoutActuallyEscaping` checks exactly that.
    let detection = DeadlockDetection.settings.withLock { $0 }
    let resolution = withoutActuallyEscaping(body) { body -> Resolution? in
      let parking = Parking()
      let waiter = Waiter(
        site: site, thread: thread.id, attempt: { erase(body) }, parking: parking)
      let step = Registry.shared.withLock { registry -> (hop: Bool, cycle: DeadlockReport?)? in
        if cell.isDone { return nil }
        let flight = registry.flight(for: cell)
        flight.waiters.append(waiter)
        let cycle = registry.beginWait(for: cell, site: site, on: thread.id, detection: detection)
        guard flight.runner == nil && flight.pendingHops == 0 else { return (false, cycle) }
        flight.pendingHops += 1
        return (true, cycle)
      }
      guard let step else {
        waiter.attempt = nil
        return nil
      }
      step.cycle?.deliver(at: site)
      if step.hop { hop(to: cell.key) }
      let resolution = parking.wait()
      DeadlockDetection.endWait(on: thread.id)
      return resolution
    }
    switch resolution {
    case nil, .done, .ran(.success):
      return true
    case .ran(.failure(let error)):
      // The error came from this caller's own initializer, which throws `Failure`.
      throw error as! Failure
    case .retry:
      return false
    case .cancelled:
      Diagnostics.internalInconsistency("a blocked waiter was cancelled")
    }
  }

  /// Sends a hop to the main queue. Where the main queue's owner is known and is not this
  /// thread, `main.sync` is safe and cheapest (after `dispatchMain()` it runs the block on this
  /// thread). Where it is not known, this thread might hold the main queue without knowing it,
  /// and `main.sync` would trap, so the hop is asynchronous.
  private static func hop(to key: UnsafeRawPointer) {
    let key = SendableKey(key)
    if QueueOwnership.isAvailable {
      DispatchQueue.main.sync { drive(key.key) }
    } else {
      DispatchQueue.main.async { drive(key.key) }
    }
  }

  /// Runs queued attempts for a cell in main context, in arrival order, until one succeeds or
  /// none is left. The body of every hop.
  static func drive(_ key: UnsafeRawPointer) {
    let thread = ThreadRecord.current
    Watchdog.noteMainQueueServed()
    // After `dispatchMain()`, `main.sync` runs this block on the thread that sent the hop: while
    // it runs here, that thread is not blocked, so its wait leaves the graph until the hop ends.
    let suspendedWait = Registry.shared.withLock { registry in
      registry.flights[key]?.pendingHops -= 1
      return registry.endWait(on: thread.id)
    }
    defer {
      if let suspendedWait {
        Registry.shared.withLock { $0.waits[thread.id] = suspendedWait }
      }
    }
    while let (flight, waiter, result) = runNext(key, on: thread) {
      let deliveries = Registry.shared.withLock { registry in
        registry.complete(flight, with: result, ranFor: waiter, policy: .mainQueue)
      }
      deliveries.deliver()
      if flight.isFinished { return }
    }
  }

  /// Takes the first queued attempt and runs it. The attempt is a local of this function, so it
  /// is released before `drive` delivers the result and wakes its owner.
  private static func runNext(
    _ key: UnsafeRawPointer, on thread: ThreadRecord
  ) -> (Flight, Waiter, Result<UInt, any Error>)? {
    let next = Registry.shared.withLock { registry -> (Flight, Waiter, Attempt)? in
      guard let flight = registry.flights[key] else { return nil }
      if let runner = flight.runner {
        // A run loop nested in the running initializer has served this hop. The initializer will
        // resolve the waiters when it returns.
        guard runner.thread == thread.id else {
          Diagnostics.internalInconsistency(
            "\(thread.id) holds the main queue while \(runner.thread) runs \(flight.cell.label)")
        }
        return nil
      }
      guard let waiter = flight.waiters.first(where: { $0.attempt != nil }),
        let attempt = waiter.attempt
      else {
        registry.retireIfIdle(flight)
        return nil
      }
      waiter.attempt = nil
      flight.runner = Runner(thread: thread.id, site: waiter.site)
      return (flight, waiter, attempt)
    }
    guard let (flight, waiter, attempt) = next else { return nil }
    return (flight, waiter, invoke(attempt, on: thread))
  }

  /// Calls an initializer, counting it on the thread so that main context stays provable.
  private static func invoke<Failure: Error>(
    _ body: () throws(Failure) -> UInt, on thread: ThreadRecord
  ) -> Result<UInt, Failure> {
    thread.initializerDepth += 1
    defer { thread.initializerDepth -= 1 }
    return Result { () throws(Failure) in try body() }
  }

  private static func invoke(_ attempt: Attempt, on thread: ThreadRecord) -> Result<UInt, any Error>
  {
    thread.initializerDepth += 1
    defer { thread.initializerDepth -= 1 }
    return attempt()
  }

  private static func erase<Failure: Error>(_ body: () throws(Failure) -> UInt) -> Result<
    UInt, any Error
  > {
    Result { () throws(Failure) in try body() }.mapError { $0 }
  }
}
