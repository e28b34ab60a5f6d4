/// The `service` policy (``DeadlockDetection/Response/service``): main-queue code that blocks
/// in a tracked wait runs, in place, the MainOnce initializers its wait depends on.
///
/// The classic deadlock: main-queue code waits for a worker, and the worker waits for an
/// initializer that needs the main queue. The main-queue thread holds the main queue, so it can
/// run that initializer itself, nested in its wait, as a run loop nested in main-queue code runs
/// other main-queue work. The initializer's caller is answered as if a hop had run it, the
/// worker goes on, and the wait ends normally.
///
/// A wait serves before it blocks: the initializers that threads it depends on (through the
/// wait-for graph) already wait for. Semaphore and group waits without a deadline also serve
/// while they block: the wait itself happens off the thread, which parks at a ``ServiceDesk``
/// that the end of the wait or a worker that closes a cycle through it wakes. Other tracked
/// waits (`withTrackedWait`, `trackedSync`) cannot be interrupted: a cycle that forms after they
/// block is stopped with the usual report, as is any cycle that no initializer can break.
enum Servicing {
  /// Whether a wait by code in main context is to serve initializers.
  static func applies(holdingMainQueue: Bool) -> Bool {
    holdingMainQueue && DeadlockDetection.cycleResponse == .service
  }

  /// Runs, in place, each initializer that `wait` depends on and that waits for the main queue,
  /// until none is left. The caller holds the main queue.
  static func serve(_ wait: BlockedWait, on thread: ThreadRecord) {
    while let (flight, first) = Registry.shared.withLock({
      $0.claimFlight(servedBy: wait, on: thread.id)
    }) {
      OnceEngine.drive(flight, from: first, on: thread)
    }
  }

  /// Waits as `start` does, off the calling thread, serving initializers until the wait ends.
  /// `start` begins the wait and calls its argument once the wait is over.
  static func wait(
    _ blocked: BlockedWait, on thread: ThreadRecord,
    start: (@escaping @Sendable () -> Void) -> Void
  ) {
    let desk = ServiceDesk(end: blocked.end!)
    var blocked = blocked
    blocked.desk = desk
    serve(blocked, on: thread)
    let previous = DeadlockDetection.beginWait(blocked, on: thread.id, recheck: nil)
    defer { DeadlockDetection.endWait(blocked, on: thread.id, restoring: previous) }
    start { desk.finish() }
    while true {
      serve(blocked, on: thread)
      if desk.isFinished { return }
      desk.park()
    }
  }
}

/// Where a main-queue wait that serves initializers parks: woken when the wait ends, or when a
/// worker closes a cycle through it.
final class ServiceDesk: Sendable {
  private let parking = Parking()
  /// The end of the wait this desk serves.
  private let end: WaitEnd

  init(end: WaitEnd) {
    self.end = end
  }

  var isFinished: Bool { end.isMarked }

  func finish() {
    end.mark()
    parking.signal()
  }

  func wake() { parking.signal() }

  func park() { parking.wait() }
}

extension Registry {
  /// An initializer that `wait` depends on through the wait-for graph, that waits for the main
  /// queue and that nobody runs: made `thread`'s to run in place. `nil` if there is none.
  mutating func claimFlight(servedBy wait: BlockedWait, on thread: ThreadID) -> (
    Flight, first: Waiter
  )? {
    var visited: Set<ThreadID> = [thread]
    var pending = [wait]
    while let wait = pending.popLast() {
      var found: Flight?
      forEachBlocker(of: wait, asker: thread, askerHoldsMainQueue: true) { blocker in
        guard visited.insert(blocker.thread).inserted, let next = waits[blocker.thread],
          next.canBeInCycle
        else { return true }
        if case .flight(let flight, _) = next.object, flight.awaitsMainQueue, !flight.queue.isEmpty
        {
          found = flight
          return false
        }
        pending.append(next)
        return true
      }
      if let found, let first = startNextAttempt(of: found, on: thread) { return (found, first) }
    }
    return nil
  }
}
