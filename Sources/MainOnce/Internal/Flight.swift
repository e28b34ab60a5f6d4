internal import Dispatch

/// A caller's initializer, type-erased. It returns the value to publish in the cell (non-zero).
typealias Attempt = () -> Result<UInt, any Error>

/// How a waiter's wait ended.
enum Resolution {
  /// Another caller's initializer succeeded.
  case done
  /// This waiter's own initializer ran, with this result.
  case ran(Result<UInt, any Error>)
  /// Another caller's initializer failed; try again (calling-thread policy).
  case retry
  /// The waiter was withdrawn before its initializer started.
  case cancelled
}

/// The thread running a cell's initializer and the call it came from.
struct Runner {
  let thread: ThreadID
  let site: CallSite
}

/// The state of a cell with calls in progress. Guarded by ``OnceEngine/table``.
final class Flight {
  let cell: OnceCell
  var runner: Runner?
  /// Hops to the main queue that have been sent and have not started.
  var pendingHops = 0
  var waiters: [Waiter] = []
  /// Set when an initializer has succeeded and the cell is done.
  var isFinished = false

  init(cell: OnceCell) {
    self.cell = cell
  }
}

/// A caller waiting for a cell, with the initializer it brought.
final class Waiter: @unchecked Sendable {
  // This is safe because `attempt` is only read and written under ``OnceEngine/table``'s lock,
  // and the other stored properties never change.
  let site: CallSite
  /// The blocked thread, for the wait-for graph; `nil` for async and completion callers.
  let thread: ThreadID?
  /// The initializer; `nil` once taken to run, or once the waiter is resolved.
  var attempt: Attempt?
  private let onResolution: @Sendable (Resolution) -> Void

  /// A thread that blocks in `parking` until resolved.
  init(site: CallSite, thread: ThreadID, attempt: Attempt?, parking: Parking) {
    self.site = site
    self.thread = thread
    self.attempt = attempt
    onResolution = { parking.resolve($0) }
  }

  /// An async or completion caller, resumed by `onResolution`.
  init(
    site: CallSite, attempt: @escaping Attempt,
    onResolution: @escaping @Sendable (Resolution) -> Void
  ) {
    self.site = site
    thread = nil
    self.attempt = attempt
    self.onResolution = onResolution
  }

  func resolve(_ resolution: Resolution) {
    onResolution(resolution)
  }
}

/// Where a blocked caller sleeps until its waiter is resolved.
final class Parking: @unchecked Sendable {
  // This is safe because `resolution` is written once before `signal()` and read after `wait()`;
  // the semaphore orders the two.
  private let semaphore = DispatchSemaphore(value: 0)
  private var resolution: Resolution?

  func resolve(_ resolution: Resolution) {
    self.resolution = resolution
    semaphore.signal()
  }

  func wait() -> Resolution {
    semaphore.wait()
    return resolution!
  }
}

/// Resolutions collected under the lock and delivered after it is released.
struct Deliveries {
  private var items: [(Waiter, Resolution)] = []

  mutating func append(_ waiter: Waiter, _ resolution: Resolution) {
    waiter.attempt = nil
    items.append((waiter, resolution))
  }

  func deliver() {
    for (waiter, resolution) in items { waiter.resolve(resolution) }
  }
}

/// Every flight in progress, by cell address.
struct FlightTable {
  var flights: [UnsafeRawPointer: Flight] = [:]

  mutating func flight(for cell: OnceCell) -> Flight {
    if let flight = flights[cell.key] { return flight }
    let flight = Flight(cell: cell)
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
    let key = SendableKey(flight.cell.key)
    DispatchQueue.main.async { OnceEngine.drive(key.key) }
  }

  /// Records the end of an attempt: publishes a success and resolves every waiter, or hands a
  /// failure to the caller it belongs to and makes sure someone tries again.
  mutating func complete(
    _ flight: Flight,
    with result: Result<UInt, any Error>,
    ranFor waiter: Waiter?,
    policy: OnceEngine.Policy
  ) -> Deliveries {
    flight.runner = nil
    var deliveries = Deliveries()
    switch result {
    case .success(let value):
      flight.cell.publish(value)
      flight.isFinished = true
      flights[flight.cell.key] = nil
      for queued in flight.waiters {
        deliveries.append(queued, queued === waiter ? .ran(result) : .done)
      }
      flight.waiters.removeAll()
    case .failure:
      if let waiter, let index = flight.waiters.firstIndex(where: { $0 === waiter }) {
        flight.waiters.remove(at: index)
        deliveries.append(waiter, .ran(result))
      }
      switch policy {
      case .callingThread:
        for queued in flight.waiters { deliveries.append(queued, .retry) }
        flight.waiters.removeAll()
      case .mainQueue:
        // A hop's loop goes on to the next waiter by itself; after an in-place failure, send a
        // hop unless one is already on its way.
        if waiter == nil && !flight.waiters.isEmpty && flight.pendingHops == 0 {
          scheduleHop(for: flight)
        }
      }
      retireIfIdle(flight)
    }
    return deliveries
  }
}

/// A cell address, sent to the main queue. This is safe because the address is only used as a
/// dictionary key and to reach the cell while its flight, which keeps a caller waiting, exists.
struct SendableKey: @unchecked Sendable {
  let key: UnsafeRawPointer
  init(_ key: UnsafeRawPointer) { self.key = key }
}
