internal import Dispatch
internal import Synchronization

/// A caller's initializer, type-erased. It returns the value to publish in the cell (non-zero).
typealias Attempt = () -> Result<UInt, any Error>

/// The record of the calls in progress for one cell that is not done: who runs an initializer,
/// who waits, and whether a hop to the main queue is on its way. Everything here is guarded by
/// ``Registry/shared``'s lock.
///
/// A flight is its cell's identity while calls are in progress. The cell's storage retains it
/// (see ``_OnceStorage``), and so does everything that refers to the cell from outside a
/// caller's borrow: a hop, a waiter, a wait-for edge. An object cannot be reallocated while it
/// is retained, so a hop or waiter left over from one cell can never act on another cell that
/// happens to reuse the storage's address: it finds its own flight, finished or idle.
///
/// A flight knows nothing of the storage. It never writes to it: callers that borrow the
/// storage publish ``outcome`` into it (see ``Cell/settle()``).
final class Flight: @unchecked Sendable {
  // This is safe because every variable is read and written only under the registry's lock,
  // which also makes their accesses exclusive, so they skip the dynamic check (about 20 ns an
  // access on this slow path).

  let label: CellLabel
  /// Where initializers run; a cell is only ever used with one policy.
  let policy: OnceEngine.Policy

  /// The value of the initializer that succeeded; `nil` until one has. Once set, the flight is
  /// finished: its queue is empty and it never runs anything again.
  @exclusivity(unchecked) var outcome: UInt?

  /// The thread running an initializer for this cell, or, under the main-queue policy, the
  /// thread in main context that runs queued initializers one after another.
  @exclusivity(unchecked) var runner: Runner?

  /// Callers waiting for the cell, in arrival order. Under the main-queue policy, each brought
  /// an initializer (its ``Waiter/attempt``), and the runner tries them in this order.
  @exclusivity(unchecked) var queue: [Waiter] = []

  /// The watchdog's notes on this flight; `nil` until it has looked at it.
  @exclusivity(unchecked) var watch: StallWatch?

  /// Whether a hop to the main queue (for an ``AsyncMainLazy``, the start of its build) is on
  /// its way. Under the main-queue policy, a flight with queued callers always has a runner or
  /// a hop on its way (see ``OnceEngine/claimHop(for:)``).
  @exclusivity(unchecked) var hopIsOnItsWay = false

  init(label: CellLabel, policy: OnceEngine.Policy) {
    self.label = label
    self.policy = policy
  }

  /// Whether the flight waits for the main queue: a main-queue flight that has not finished and
  /// that nobody runs, so that its initializers run only once the main queue's holder gets to
  /// them.
  var awaitsMainQueue: Bool {
    policy == .mainQueue && outcome == nil && runner == nil
  }

  /// Takes `waiter` out of the queue, if it is in it.
  func dequeue(_ waiter: Waiter) {
    if let index = queue.firstIndex(where: { $0 === waiter }) { queue.remove(at: index) }
  }

  // MARK: - Retained by the storage

  /// The flight attached to `storage`, if any. Call under the lock.
  static func attached(to storage: UnsafePointer<_OnceStorage>) -> Flight? {
    let raw = storage.pointee.flight.load(ordering: .relaxed)
    guard let pointer = UnsafeRawPointer(bitPattern: raw) else { return nil }
    return Unmanaged<Flight>.fromOpaque(pointer).takeUnretainedValue()
  }

  /// A +1 reference for the storage to hold.
  func retainedForStorage() -> UInt {
    UInt(bitPattern: Unmanaged.passRetained(self).toOpaque())
  }

  /// Gives back the storage's reference.
  func releaseFromStorage() {
    Unmanaged.passUnretained(self).release()
  }

  /// Gives back the reference a storage held at its end, if it held one.
  static func releaseAttached(_ raw: UInt) {
    guard let pointer = UnsafeRawPointer(bitPattern: raw) else { return }
    Unmanaged<Flight>.fromOpaque(pointer).release()
  }
}

/// The thread running a cell's initializer and the call that initializer came from.
struct Runner {
  let thread: ThreadID
  let site: CallSite
  /// The task running an `AsyncMainLazy` build; `nil` for the initializers of the other forms,
  /// which run on `thread` until they return.
  var task: UnsafeCurrentTask? = nil
  let since: UInt64 = Platform.monotonicNanoseconds()
}

/// How a caller's wait ended.
enum Resolution {
  /// An initializer for the cell succeeded: this caller's, or another's.
  case done
  /// This caller's own initializer ran and threw this error.
  case failed(any Error)
  /// Calling-thread policy: the initializer that ran failed, and this caller runs its own next.
  /// It is the flight's runner already.
  case yourTurn
  /// An async caller whose task was cancelled before its initializer started.
  case cancelled
}

extension Resolution {
  /// Ends an async caller's wait: returns if the cell is done;
  /// throws the caller's own initializer's error, or `CancellationError`, otherwise.
  func endAsyncWait() throws {
    switch self {
    case .done: return
    case .failed(let error): throw error
    case .cancelled: throw CancellationError()
    case .yourTurn: Diagnostics.internalInconsistency("an async caller was handed a run")
    }
  }
}

/// One caller waiting for a cell, with the initializer it brought and how to tell it the end.
final class Waiter: @unchecked Sendable {
  // This is safe because the variables are only read and written under the registry's lock,
  // except `resolution`, which is written once under the lock before the waiter is told and
  // read by its caller after being told (the lock or the parking's semaphore orders the two).

  /// How a waiter learns its resolution.
  enum Delivery {
    /// A thread blocked in `parking`.
    case parked(Parking)
    /// A suspended task; `nil` until the task has suspended.
    case task(UnsafeContinuation<Resolution, Never>?)
    /// A completion-form call: the closure submits its handler to its queue. It is called under
    /// the lock, so that handlers keep the order of the calls.
    case handler(@Sendable (Resolution) -> Void)
    /// The caller itself runs the flight (in main context, or as the calling-thread runner) and
    /// reads ``resolution`` when it is done.
    case inPlace
  }

  let site: CallSite
  /// The blocked thread, for a caller that blocks; `nil` for tasks and completion handlers.
  let thread: ThreadID?
  /// When the caller arrived.
  let since = Platform.monotonicNanoseconds()
  /// The caller's initializer; `nil` once the waiter is resolved.
  @exclusivity(unchecked) var attempt: Attempt?
  /// Set while the caller's initializer runs: from then on the caller waits for its result.
  @exclusivity(unchecked) var isRunning = false
  @exclusivity(unchecked) var delivery: Delivery
  /// The flight the waiter is queued in; `nil` before it is queued and once it is resolved.
  @exclusivity(unchecked) var flight: Flight?
  @exclusivity(unchecked) var resolution: Resolution?

  /// Whether the caller waits: it is not the one running the flight in place.
  var isWaiting: Bool {
    if case .inPlace = delivery { false } else { true }
  }

  init(site: CallSite, thread: ThreadID? = nil, attempt: Attempt?, delivery: Delivery) {
    self.site = site
    self.thread = thread
    self.attempt = attempt
    self.delivery = delivery
  }
}

/// Resolutions decided under the lock, delivered after it is released.
struct Deliveries {
  private var woken: [Waiter] = []
  /// The watchdog's word that a wait it reported has ended.
  var endOfStall: DeadlockReport?

  /// Resolves `waiter`. Under the lock: from here on nothing runs its initializer, and a
  /// completion handler is submitted right away, in order.
  mutating func resolve(_ waiter: Waiter, _ resolution: Resolution) {
    waiter.attempt = nil
    waiter.isRunning = false
    waiter.flight = nil
    waiter.resolution = resolution
    switch waiter.delivery {
    case .handler(let submit): submit(resolution)
    case .inPlace: break
    case .parked, .task: woken.append(waiter)
    }
  }

  /// Wakes the blocked threads and resumes the tasks. After the lock is released.
  func deliver() {
    endOfStall?.deliver(at: nil)
    for waiter in woken {
      switch waiter.delivery {
      case .parked(let parking): parking.signal()
      case .task(let continuation): continuation?.resume(returning: waiter.resolution!)
      case .handler, .inPlace: break
      }
    }
  }
}

/// Where a blocked caller sleeps until its waiter is resolved. Each thread keeps one to reuse
/// (see ``ThreadRecord/takeParking()``): every use is one `signal` and one `wait`.
final class Parking: Sendable {
  private let semaphore = DispatchSemaphore(value: 0)

  func signal() { semaphore.signal() }
  func wait() { semaphore.wait() }
}
