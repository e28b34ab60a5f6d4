internal import Synchronization

/// The `service` policy (``DeadlockDetection/Response/service``): main-queue code that blocks
/// in a tracked wait runs, in place, the MainOnce initializers its wait depends on.
///
/// The classic deadlock: main-queue code waits for a worker, and the worker waits for an
/// initializer that needs the main queue. The main-queue thread holds the main queue, so it can
/// run that initializer itself, nested in its wait, as a run loop nested in main-queue code runs
/// other main-queue work. The initializer's caller is answered as if a hop had run it, the
/// worker goes on, and the wait ends normally. While it serves, the thread is not in its
/// blocking call: the deadlock detector does not count its wait (``RecordedWait/blocking``).
///
/// A wait serves before it blocks: the initializers that threads it depends on (through the
/// wait-for graph) already wait for. Semaphore and group waits without a deadline also serve
/// while they block: the wait itself happens on a thread of MainOnce's own (never a libdispatch
/// worker, which may all be busy), and the main-queue thread parks at a ``ServiceDesk`` that the
/// end of the wait wakes, and so does every thread that forms a cycle through it, proven or not
/// (waking it again is harmless: it serves what it can and parks again). Other tracked waits
/// (`withTrackedWait`, `trackedSync`) cannot be interrupted: a cycle that forms after they block
/// is stopped as under `abort`, as is any cycle that no initializer can break.
enum Servicing {
  /// Whether a wait by code in main context is to serve initializers.
  static func applies(holdingMainQueue: Bool) -> Bool {
    holdingMainQueue && DeadlockDetection.cycleResponse == .service
  }

  /// Runs, in place, each initializer that `wait` depends on and that waits for the main queue,
  /// until none is left. The caller holds the main queue.
  static func serve(_ wait: RecordedWait, on thread: ThreadRecord) {
    while let flight = Detector.state.withLock({ $0.serviceableFlight(for: wait) }) {
      MainQueueEngine.driveUnlessDriven(flight, on: thread, isHop: false)
    }
  }

  /// Waits as `start` does, serving initializers until the wait ends. `start` runs on a thread
  /// of MainOnce's own; it waits, then calls its argument.
  static func wait(
    for target: WaitTarget, operation: StaticString, site: CallSite, on thread: ThreadRecord,
    start: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void
  ) {
    let desk = ServiceDesk()
    let wait = RecordedWait(
      on: thread.id, object: .target(target), operation: operation, site: site,
      holdsMainQueue: true, evidence: .sleepsInWait, desk: desk)
    serve(wait, on: thread)
    guard Platform.startThread({ start { desk.finish() } }) == 0 else {
      // No thread to wait on: wait here, without serving.
      return trackingWait(
        for: target, operation: operation, site: site, evidence: .sleepsInWait
      ) { recorded in recorded.blocking { start {} } }
    }
    Detector.begin(wait)
    defer { Detector.end(wait) }
    while true {
      serve(wait, on: thread)
      if desk.isFinished { return }
      wait.blocking { desk.park() }
    }
  }
}

/// Where a main-queue wait that serves initializers parks: woken when the wait ends, or when a
/// thread forms a cycle through it.
final class ServiceDesk: Sendable {
  private let parking = Parking()
  private let finished = Atomic(false)

  var isFinished: Bool { finished.load(ordering: .acquiring) }

  func finish() {
    finished.store(true, ordering: .releasing)
    parking.signal()
  }

  func wake() { parking.signal() }

  func park() { parking.wait() }
}

extension DetectorState {
  /// A main-queue flight that `wait` depends on through the wait-for graph, that waits for the
  /// main queue and that nobody runs. `nil` if there is none.
  func serviceableFlight(for wait: RecordedWait) -> Flight? {
    var visited: Set<ThreadID> = [wait.thread]
    var pending = [wait]
    while let wait = pending.popLast() {
      var found: Flight?
      forEachBlocker(of: wait) { blocker in
        guard visited.insert(blocker.thread).inserted, let next = activeWait(of: blocker.thread),
          next.canBeInCycle
        else { return true }
        if case .subject(let subject, _) = next.object, let flight = subject as? Flight,
          flight.obstacle() == .mainQueue
        {
          found = flight
          return false
        }
        pending.append(next)
        return true
      }
      if let found { return found }
    }
    return nil
  }
}
