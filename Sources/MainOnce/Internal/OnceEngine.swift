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
      let flight = registry.flight(for: cell, policy: .mainQueue)
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
    case wait(Parking, previous: BlockedWait?, DeadlockReport?)
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
    let detection = DeadlockDetection.Snapshot.current
    let decision = Registry.shared.withLock { registry -> InPlaceDecision in
      if cell.isDone { return .done }
      let flight = registry.flight(for: cell, policy: policy)
      guard let runner = flight.runner else {
        flight.runner = Runner(thread: thread.id, site: site)
        return .run(flight)
      }
      if runner.thread == thread.id { return .reentrant(runner) }
      guard policy == .callingThread else {
        Diagnostics.internalInconsistency(
          "\(thread.id) holds the main queue while \(runner.thread) runs \(cell.label)")
      }
      let parking = thread.takeParking()
      flight.waiters.append(Waiter(site: site, thread: thread.id, attempt: nil, parking: parking))
      let (previous, cycle) = registry.beginWait(
        for: flight, site: site, on: thread.id, detection: detection)
      return .wait(parking, previous: previous, cycle)
    }
    switch decision {
    case .done:
      return true
    case .reentrant(let runner):
      Diagnostics.reentrance(cell.label, firstCall: runner.site, secondCall: site)
    case .wait(let parking, let previous, let cycle):
      cycle?.deliver(at: site)
      let resolution = parking.wait()
      thread.returnParking(parking)
      DeadlockDetection.endWait(on: thread.id, restoring: previous)
      switch resolution {
      case .done: return true
      case .retry: return false
      case .ran, .cancelled:
        Diagnostics.internalInconsistency("a waiter without an initializer was run or cancelled")
      }
    case .run(let flight):
      let result = invoke(body, on: thread)
      let deliveries = Registry.shared.withLock { registry in
        registry.complete(flight, with: result, ranFor: nil)
      }
      deliveries.deliver()
      try rethrow(result, as: Failure.self)
      return true
    }
  }

  /// Calls an initializer, counting it on the thread so that main context stays provable.
  static func invoke<Failure: Error>(
    _ body: () throws(Failure) -> UInt, on thread: ThreadRecord
  ) -> Result<UInt, any Error> {
    thread.initializerDepth += 1
    defer { thread.initializerDepth -= 1 }
    return erase(body)
  }

  static func invoke(_ attempt: Attempt, on thread: ThreadRecord) -> Result<UInt, any Error> {
    thread.initializerDepth += 1
    defer { thread.initializerDepth -= 1 }
    return attempt()
  }

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

  /// Throws the error of a failed result, which came from an initializer that throws `Failure`.
  static func rethrow<Failure: Error>(
    _ result: Result<UInt, any Error>, as _: Failure.Type
  ) throws(Failure) {
    if case .failure(let error) = result { throw error as! Failure }
  }
}
