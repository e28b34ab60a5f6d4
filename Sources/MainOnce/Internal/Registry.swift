internal import Dispatch

/// Everything MainOnce's slow paths share, under one lock: the flights in progress and the
/// wait-for graph the deadlock detector reads. One lock keeps the graph consistent with the
/// flights it describes; nothing here is touched on a fast path.
struct Registry {
  static let shared = Locked(Registry())

  /// Cells with calls in progress, by cell address.
  var flights: [UnsafeRawPointer: Flight] = [:]
  /// What each blocked thread waits for.
  var waits: [ThreadID: BlockedWait] = [:]
  /// Threads performing each unit of work a tracked wait can name.
  var performers: [WaitTarget.WorkID: [ThreadID: Int]] = [:]
  /// The watchdog thread's state.
  var watchdog = WatchdogState()

  mutating func flight(for cell: OnceCell, policy: OnceEngine.Policy) -> Flight {
    if let flight = flights[cell.key] { return flight }
    let flight = Flight(cell: cell, policy: policy)
    flights[cell.key] = flight
    return flight
  }

  /// Forgets a flight that nobody runs, waits for or is about to drive.
  mutating func retireIfIdle(_ flight: Flight) {
    if flight.runner == nil && flight.pendingHops == 0 && flight.waiters.isEmpty {
      flights[flight.cell.key] = nil
    }
  }

  /// Sends an asynchronous hop that will run the flight's queued attempts on the main queue.
  mutating func scheduleHop(for flight: Flight) {
    flight.pendingHops += 1
    Instrumentation.noteMainQueueWorkItem()
    let key = SendableKey(flight.cell.key)
    DispatchQueue.main.async { OnceEngine.drive(key.key) }
  }

  /// Records the end of an attempt: publishes a success and resolves every waiter, or hands a
  /// failure to the caller it belongs to and makes sure someone tries again: the hop the
  /// attempt ran in (`inHop`) goes on to the next waiter itself; otherwise a hop is sent.
  mutating func complete(
    _ flight: Flight,
    with result: Result<UInt, any Error>,
    ranFor waiter: Waiter?,
    inHop: Bool = false
  ) -> Deliveries {
    flight.runner = nil
    var deliveries = Deliveries()
    switch result {
    case .success(let value):
      for queued in flight.waiters where queued.resolvesInOrder {
        queued.attempt = nil
        queued.resolve(queued === waiter ? .ran(result) : .done)
      }
      flight.cell.publish(value)
      flight.isFinished = true
      flights[flight.cell.key] = nil
      for queued in flight.waiters where !queued.resolvesInOrder {
        deliveries.append(queued, queued === waiter ? .ran(result) : .done)
      }
      flight.waiters.removeAll()
    case .failure:
      if let waiter, let index = flight.waiters.firstIndex(where: { $0 === waiter }) {
        flight.waiters.remove(at: index)
        deliveries.append(waiter, .ran(result))
      }
      switch flight.policy {
      case .callingThread:
        for queued in flight.waiters { deliveries.append(queued, .retry) }
        flight.waiters.removeAll()
      case .mainQueue:
        if !inHop && !flight.waiters.isEmpty && flight.pendingHops == 0 {
          scheduleHop(for: flight)
        }
      }
      retireIfIdle(flight)
    }
    return deliveries
  }
}
