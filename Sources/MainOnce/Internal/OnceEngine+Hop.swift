internal import Dispatch

/// The path of a blocking caller outside main context: it sends one hop to the main queue, or
/// joins the flight that already has one, and blocks until the cell is done or its own
/// initializer has run.
extension OnceEngine {
  private enum Claim {
    /// This caller sends a synchronous hop and runs its initializer in it.
    case hop
    /// This caller queues its initializer (see `waitInQueue`).
    case queue
  }

  /// How a synchronous hop found the flight.
  private enum HopStart {
    case run(Flight)
    /// The cell was finished before the hop ran.
    case done
    /// Already running on this thread: the hop was served by a nested run loop.
    case busy
  }

  /// What a synchronous hop did with the caller's initializer.
  private enum HopOutcome {
    case ran(Result<UInt, any Error>)
    /// The cell was done, or finished by someone else, before the hop ran.
    case done
    /// A run loop nested in the running initializer served the hop: queue and wait.
    case mustWait
  }

  /// Returns `false` to go around again: the flight this caller joined failed and was gone
  /// before it could queue.
  static func runOnMainQueue<Failure: Error>(
    _ cell: OnceCell,
    site: CallSite,
    thread: ThreadRecord,
    _ body: () throws(Failure) -> UInt
  ) throws(Failure) -> Bool {
    let detection = DeadlockDetection.Snapshot.current
    let claimed = Registry.shared.withLock {
      registry -> (Claim, previous: BlockedWait?, cycle: DeadlockReport?)? in
      if cell.isDone { return nil }
      let flight = registry.flight(for: cell, policy: .mainQueue)
      let (previous, cycle) = registry.beginWait(
        for: flight, site: site, on: thread.id, detection: detection)
      // A synchronous hop needs the main queue's owner to be readable: then this thread is
      // known not to hold the main queue, and `main.sync` cannot trap.
      guard flight.runner == nil && flight.pendingHops == 0 && QueueOwnership.isAvailable else {
        return (.queue, previous, cycle)
      }
      flight.pendingHops += 1
      return (.hop, previous, cycle)
    }
    guard let (claim, previous, cycle) = claimed else { return true }
    cycle?.deliver(at: site)
    if case .hop = claim {
      switch hopAndRun(cell.key, site: site, requester: thread.id, restoring: previous, body) {
      case .ran(let result):
        // A failure came from this caller's own initializer, which throws `Failure`.
        try rethrow(result, as: Failure.self)
        return true
      case .done:
        return true
      case .mustWait:
        break
      }
    }
    return try waitInQueue(cell, site: site, thread: thread, restoring: previous, body)
  }

  /// Runs the caller's initializer in a synchronous hop to the main queue, then any attempts
  /// queued behind it if it failed.
  ///
  /// Used only where the main queue's owner can be read: then this thread is known not to hold
  /// the main queue, and `main.sync` cannot trap. After `dispatchMain()` the hop runs on the
  /// calling thread, which is then not blocked: its wait ends as the hop starts, so that neither
  /// the wait-for graph nor the watchdog sees a thread waiting for its own initializer.
  private static func hopAndRun<Failure: Error>(
    _ key: UnsafeRawPointer,
    site: CallSite,
    requester: ThreadID,
    restoring previous: BlockedWait?,
    _ body: () throws(Failure) -> UInt
  ) -> HopOutcome {
    Instrumentation.noteMainQueueWorkItem()
    // `DispatchQueue.main.sync` written out would make the closure main-actor isolated, and this
    // non-escaping, non-`Sendable` initializer could not be captured. It runs in main context
    // either way.
    let mainQueue: DispatchQueue = .main
    var outcome = HopOutcome.mustWait
    // `sync(execute:)` returning a value takes a slower generic path in the Dispatch overlay
    // than the `Void` form: a few hundred ns more on every first call.
    mainQueue.sync { outcome = runHop() }
    return outcome

    func runHop() -> HopOutcome {
      let thread = ThreadRecord.current
      let runsOnRequester = thread.id == requester
      Watchdog.noteMainQueueServed()
      let (start, ended) = Registry.shared.withLock { registry -> (HopStart, BlockedWait?) in
        guard let flight = registry.flights[key] else {
          return (.done, registry.endWait(on: requester, restoring: previous))
        }
        flight.pendingHops -= 1
        if let runner = flight.runner {
          guard runner.thread == thread.id else {
            Diagnostics.internalInconsistency(
              "\(thread.id) holds the main queue while \(runner.thread) runs \(flight.cell.label)")
          }
          return (.busy, nil)
        }
        flight.runner = Runner(thread: thread.id, site: site)
        return (
          .run(flight),
          runsOnRequester ? registry.endWait(on: requester, restoring: previous) : nil
        )
      }
      Watchdog.reportEnd(of: ended, on: requester)
      let flight: Flight
      switch start {
      case .run(let running): flight = running
      case .done: return .done
      case .busy: return .mustWait
      }
      let result = invoke(body, on: thread)
      let (deliveries, endedNow) = Registry.shared.withLock { registry in
        (
          registry.complete(flight, with: result, ranFor: nil, inHop: true),
          runsOnRequester ? nil : registry.endWait(on: requester, restoring: previous)
        )
      }
      deliveries.deliver()
      Watchdog.reportEnd(of: endedNow, on: requester)
      if !flight.isFinished { driveQueued(key, on: thread) }
      return .ran(result)
    }
  }

  /// Queues the caller's initializer in the flight, sends an asynchronous hop if none is on its
  /// way and nobody runs an initializer, and blocks until it is resolved.
  ///
  /// Queueing and deciding on the hop happen under one lock: decided earlier, the hop could
  /// run before the initializer is queued, find nothing to run and retire the flight, and the
  /// caller would start over with a second hop.
  private static func waitInQueue<Failure: Error>(
    _ cell: OnceCell,
    site: CallSite,
    thread: ThreadRecord,
    restoring previous: BlockedWait?,
    _ body: () throws(Failure) -> UInt
  ) throws(Failure) -> Bool {
    let parking = thread.takeParking()
    defer { thread.returnParking(parking) }
    // The initializer is stored in the flight only while this thread is parked, and every
    // reference to it is dropped before the parking is signalled (see `runNext`), so it does not
    // outlive this call: `withoutActuallyEscaping` checks exactly that.
    let resolution = withoutActuallyEscaping(body) { body -> Resolution in
      let waiter = Waiter(
        site: site, thread: thread.id, attempt: { erase(body) }, parking: parking)
      // Between the claim and here, the flight may have finished: done, or retired after a
      // failure with nobody left to try again. Then this caller starts over.
      let gone = Registry.shared.withLock { registry -> Resolution? in
        guard let flight = registry.flights[cell.key] else {
          _ = registry.endWait(on: thread.id, restoring: previous)
          return cell.isDone ? .done : .retry
        }
        flight.waiters.append(waiter)
        if flight.runner == nil && flight.pendingHops == 0 { registry.scheduleHop(for: flight) }
        return nil
      }
      if let gone {
        waiter.attempt = nil
        return gone
      }
      let resolution = parking.wait()
      DeadlockDetection.endWait(on: thread.id, restoring: previous)
      return resolution
    }
    switch resolution {
    case .done, .ran(.success):
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

  /// Runs queued attempts for a cell in main context, in arrival order, until one succeeds or
  /// none is left: the body of an asynchronous hop.
  static func drive(_ key: UnsafeRawPointer) {
    Watchdog.noteMainQueueServed()
    driveQueued(key, on: ThreadRecord.current, isHopStart: true)
  }

  private static func driveQueued(
    _ key: UnsafeRawPointer, on thread: ThreadRecord, isHopStart: Bool = false
  ) {
    var isHopStart = isHopStart
    while let (flight, waiter, result) = runNext(key, on: thread, isHopStart: isHopStart) {
      isHopStart = false
      let deliveries = Registry.shared.withLock { registry in
        registry.complete(flight, with: result, ranFor: waiter, inHop: true)
      }
      deliveries.deliver()
      if flight.isFinished { return }
    }
  }

  /// Takes the first queued attempt and runs it. The attempt is a local of this function, so it
  /// is released before the caller delivers the result and wakes its owner. At the start of a
  /// hop it also counts the hop as arrived, under the same lock, so that no caller sees the
  /// flight with neither a hop on its way nor a runner.
  private static func runNext(
    _ key: UnsafeRawPointer, on thread: ThreadRecord, isHopStart: Bool
  ) -> (Flight, Waiter, Result<UInt, any Error>)? {
    let next = Registry.shared.withLock { registry -> (Flight, Waiter, Attempt)? in
      guard let flight = registry.flights[key] else { return nil }
      if isHopStart { flight.pendingHops -= 1 }
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
}
