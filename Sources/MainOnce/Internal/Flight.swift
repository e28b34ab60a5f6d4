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

/// The state of a cell with calls in progress. Guarded by ``Registry/shared``.
///
/// Its variables skip Swift's dynamic exclusivity checks (about 20 ns an access on this slow
/// path): the registry's lock already makes every access exclusive.
final class Flight {
  let cell: OnceCell
  /// Where the cell's initializers run: a cell is only ever used with one policy.
  let policy: OnceEngine.Policy
  @exclusivity(unchecked) var runner: Runner?
  /// Hops to the main queue that have been sent and have not started.
  @exclusivity(unchecked) var pendingHops = 0
  @exclusivity(unchecked) var waiters: [Waiter] = []
  /// Set when an initializer has succeeded and the cell is done.
  @exclusivity(unchecked) var isFinished = false

  init(cell: OnceCell, policy: OnceEngine.Policy) {
    self.cell = cell
    self.policy = policy
  }
}

/// A caller waiting for a cell, with the initializer it brought.
final class Waiter: @unchecked Sendable {
  // This is safe because `attempt` is only read and written under ``Registry/shared``'s lock,
  // and the other stored properties never change. The lock also makes `attempt`'s accesses
  // exclusive, so it skips the dynamic check.
  let site: CallSite
  /// The blocked thread, for the wait-for graph; `nil` for async and completion callers.
  let thread: ThreadID?
  /// The initializer; `nil` once taken to run, or once the waiter is resolved.
  @exclusivity(unchecked) var attempt: Attempt?
  /// Whether resolving this waiter only enqueues work (a completion handler), so that it can be
  /// resolved under the lock, before the cell is published: then handlers keep arrival order
  /// with callers that find the cell done and enqueue theirs directly.
  let resolvesInOrder: Bool
  private let parking: Parking?
  private let onResolution: (@Sendable (Resolution) -> Void)?

  /// A thread that blocks in `parking` until resolved.
  init(site: CallSite, thread: ThreadID, attempt: Attempt?, parking: Parking) {
    self.site = site
    self.thread = thread
    self.attempt = attempt
    resolvesInOrder = false
    self.parking = parking
    onResolution = nil
  }

  /// An async or completion caller, resumed by `onResolution`.
  init(
    site: CallSite, attempt: @escaping Attempt, resolvesInOrder: Bool,
    onResolution: @escaping @Sendable (Resolution) -> Void
  ) {
    self.site = site
    thread = nil
    self.attempt = attempt
    self.resolvesInOrder = resolvesInOrder
    parking = nil
    self.onResolution = onResolution
  }

  func resolve(_ resolution: Resolution) {
    if let parking {
      parking.resolve(resolution)
    } else {
      onResolution?(resolution)
    }
  }
}

/// Where a blocked caller sleeps until its waiter is resolved. Each thread keeps one to reuse
/// (see ``ThreadRecord/takeParking()``): every use is one `resolve` and one `wait`.
final class Parking: @unchecked Sendable {
  // This is safe because `resolution` is written once before `signal()` and read after `wait()`;
  // the semaphore orders the two, which also makes the accesses exclusive.
  private let semaphore = DispatchSemaphore(value: 0)
  @exclusivity(unchecked) private var resolution: Resolution?

  func resolve(_ resolution: Resolution) {
    self.resolution = resolution
    semaphore.signal()
  }

  func wait() -> Resolution {
    semaphore.wait()
    defer { resolution = nil }
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

/// A cell address, sent to the main queue. This is safe because the address is only used as a
/// dictionary key and to reach the cell while its flight, which keeps a caller waiting, exists.
struct SendableKey: @unchecked Sendable {
  let key: UnsafeRawPointer
  init(_ key: UnsafeRawPointer) { self.key = key }
}
