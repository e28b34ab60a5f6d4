internal import Dispatch
internal import Synchronization

#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Musl)
  internal import Musl
#elseif canImport(Darwin)
  internal import Darwin
#endif

/// The watchdog thread's bookkeeping, kept in the ``Registry``.
struct WatchdogState {
  var isStarted = false
  /// Parked without a timeout, because nothing has waited for a while.
  var isParked = false
  /// Rounds in a row with nothing to watch.
  var idleRounds = 0
}

/// Reports waits for the main queue that do not end, explaining what the main queue is doing.
///
/// One thread, started by the first wait for the main queue. While anything waits, it sleeps
/// until the next wait reaches the stall timeout; when nothing waits it sleeps one timeout at a
/// time (so a new wait never needs to wake it), and after a minute of that it parks until the
/// next wait wakes it. A wait costs its thread no system call.
///
/// A stalled wait is reported once. While it goes on, the thread in its way is sampled again
/// every stall timeout, and the wait is reported a second time only if that thread turns out to
/// be blocked on a lock, which is the finding that can stop the process: a main queue that was
/// busy and then blocks waiting for the caller is not missed.
enum Watchdog {
  private static let wakeUp = DispatchSemaphore(value: 0)
  static let idleRoundsBeforeParking = 60

  /// Whether a MainOnce hop has ever run on the main queue in this process.
  static let hasSeenMainQueueServed = Atomic(false)

  static func noteMainQueueServed() {
    hasSeenMainQueueServed.store(true, ordering: .relaxed)
  }

  /// Notes a new wait for the main queue. Called under the registry lock.
  static func watch(_ registry: inout Registry) {
    if !registry.watchdog.isStarted {
      registry.watchdog.isStarted = true
      startThread()
    } else if registry.watchdog.isParked {
      registry.watchdog.isParked = false
      wakeUp.signal()
    }
  }

  /// Reports that a wait has ended, if it was reported as stalled.
  static func reportEnd(of wait: BlockedWait?, on thread: ThreadID) {
    guard let wait, wait.stallReported else { return }
    let seconds = Double(Platform.monotonicNanoseconds() - wait.since) / 1e9
    let report = DeadlockReport(
      kind: .stallEnded, stopsProcess: false,
      text: "MainOnce: \(thread)'s wait in \(wait.call) ended after"
        + " \(seconds.formatted(decimals: 1)) s")
    report.deliver(at: wait.site)
  }

  private static func startThread() {
    var thread = pthread_t()
    let status = pthread_create(&thread, nil, { _ in Watchdog.run() }, nil)
    guard status == 0 else {
      Platform.writeToStandardError(
        "MainOnce: cannot start the deadlock watchdog (pthread_create: \(status)); stalls will not be reported\n"
      )
      return
    }
    pthread_detach(thread)
  }

  private static func run() -> Never {
    while true {
      let settings = DeadlockDetection.Snapshot.current
      let timeout = settings.stallTimeoutNanoseconds
      let now = Platform.monotonicNanoseconds()
      let (stalls, sleep) = Registry.shared.withLock { registry in
        registry.collectStalls(
          now: now, timeout: timeout, watching: settings.stallResponse != .off)
      }
      for stall in stalls {
        let (report, isBlocked) = stall.report(stops: settings.stallResponse == .abort)
        // A re-check speaks only when it finds the thread in the way blocked on a lock.
        if stall.isRecheck && !isBlocked { continue }
        let isCurrent = Registry.shared.withLock { $0.noteReported(stall, isBlocked: isBlocked) }
        if isCurrent { report.deliver(at: stall.wait.site) }
      }
      if let sleep {
        _ = wakeUp.wait(timeout: .now() + .nanoseconds(Int(clamping: sleep)))
      } else {
        wakeUp.wait()
      }
    }
  }
}

extension Registry {
  /// Returns the waits for the main queue that are due for a look (they have lasted the stall
  /// timeout, or the last look was a timeout ago), scheduling their next look, and how long the
  /// watchdog may sleep (`nil`: park until woken).
  mutating func collectStalls(now: UInt64, timeout: UInt64, watching: Bool) -> ([Stall], UInt64?) {
    var stalls: [Stall] = []
    var nextDeadline: UInt64?
    for (thread, wait) in waits where watching && !wait.blockedReported {
      guard case .flight(let flight) = wait.object, flight.policy == .mainQueue,
        flight.outcome == nil
      else { continue }
      var deadline = wait.nextCheck
      if deadline <= now {
        deadline = now + timeout
        waits[thread]?.nextCheck = deadline
        stalls.append(stall(of: thread, waitingIn: wait, for: flight))
      }
      nextDeadline = min(nextDeadline ?? deadline, deadline)
    }
    if let nextDeadline {
      watchdog.idleRounds = 0
      return (stalls, nextDeadline - now)
    }
    watchdog.idleRounds += 1
    if watchdog.idleRounds > Watchdog.idleRoundsBeforeParking {
      watchdog.isParked = true
      return (stalls, nil)
    }
    return (stalls, timeout)
  }

  /// Records that the watchdog reported `stall`, and whether it found the thread in the way
  /// blocked on a lock. Returns `false` if the wait has ended meanwhile: then there is nothing to
  /// report.
  mutating func noteReported(_ stall: Stall, isBlocked: Bool) -> Bool {
    guard let wait = waits[stall.waiter], wait.since == stall.wait.since else { return false }
    waits[stall.waiter]?.stallReported = true
    if isBlocked { waits[stall.waiter]?.blockedReported = true }
    return true
  }

  private func stall(of thread: ThreadID, waitingIn wait: BlockedWait, for flight: Flight) -> Stall
  {
    let holder: Stall.Holder
    if let runner = flight.runner {
      holder = .runner(runner.thread)
    } else {
      switch QueueOwnership.ownerOfMainQueue() {
      case .thread(let owner): holder = .mainQueue(owner)
      case .nobody: holder = .nobody
      case .unknown: holder = .unknown
      }
    }
    let holderThread: ThreadID? =
      switch holder {
      case .runner(let thread), .mainQueue(let thread): thread
      case .nobody, .unknown: nil
      }
    return Stall(
      waiter: thread, wait: wait, isRecheck: wait.stallReported, label: flight.label,
      holder: holder,
      holderWait: holderThread.flatMap { waits[$0] }.map {
        ($0, DeadlockReport.describe($0.object))
      })
  }
}

/// A wait for the main queue that has lasted the stall timeout, as seen under the lock.
struct Stall {
  enum Holder {
    /// The initializer runs on this thread.
    case runner(ThreadID)
    /// The initializer has not started; this thread holds the main queue.
    case mainQueue(ThreadID)
    /// The initializer has not started and no thread holds the main queue.
    case nobody
    /// The main queue's owner cannot be read.
    case unknown
  }

  let waiter: ThreadID
  let wait: BlockedWait
  /// Whether this wait has been reported before.
  let isRecheck: Bool
  let label: CellLabel
  let holder: Holder
  /// The tracked wait the holder is in, if any, with what it waits for.
  let holderWait: (BlockedWait, String)?

  /// Samples the thread in the way and writes the report, and says whether that thread is
  /// blocked on a lock. Runs outside the lock.
  func report(stops: Bool) -> (DeadlockReport, isBlocked: Bool) {
    let seconds = Double(Platform.monotonicNanoseconds() - wait.since) / 1e9
    var lines = [
      "MainOnce: \(waiter) has waited \(seconds.formatted(decimals: 1)) s in \(wait.call) for the"
        + " initializer of \(label)"
    ]
    let (finding, hint, blocked) = explain()
    lines += finding.map { "  " + $0 }
    lines.append("hint: " + hint)
    return (
      DeadlockReport(
        kind: .stall, stopsProcess: stops && blocked, text: lines.joined(separator: "\n")),
      blocked
    )
  }

  /// What is in the way, a hint, and whether it looks like a deadlock (blocked on a lock).
  private func explain() -> ([String], String, Bool) {
    let visibleWaitHint =
      "make that wait a tracked wait, such as DispatchSemaphore.wait(for:), so that MainOnce can"
      + " name the cycle; or don't block the main queue on work that needs it: use"
      + " `await onceOnMain(token:)` or the completion form, which never block"
    switch holder {
    case .runner(let runner):
      let state = ThreadSampler.stableActivity(of: runner)
      var lines = ["the initializer is running on \(runner), which is \(state)"]
      if let (holderWait, object) = holderWait {
        lines.append(
          "\(runner) waits for \(object) in \(holderWait.call)")
      } else if state.isBlockedOnLock {
        lines.append("the initializer is probably waiting for work that waits for it")
      }
      return (
        lines, state.isBlockedOnLock ? visibleWaitHint : "waiting goes on", state.isBlockedOnLock
      )
    case .mainQueue(let owner):
      return explainHolder(owner, hint: visibleWaitHint)
    case .nobody:
      return (
        [
          "no thread holds the main queue, yet the hop has not started: libdispatch may have no"
            + " free worker thread to run it"
        ], "check for threads blocked in large numbers", false
      )
    case .unknown:
      let main = ThreadID.mainThread
      let state = ThreadSampler.stableActivity(of: main)
      guard state.activity == .suspended else { return explainHolder(main, hint: visibleWaitHint) }
      return (
        [
          "dispatchMain() serves the main queue from worker threads, and MainOnce cannot read"
            + " which one holds it (queue introspection is unavailable)",
          "if \(waiter) called from inside queue.sync within a main-queue block, it holds the main"
            + " queue itself and its hop can never start",
        ],
        "call MainOnce outside that sync, or use the async or completion form", false
      )
    }
  }

  private func explainHolder(_ owner: ThreadID, hint: String) -> ([String], String, Bool) {
    let state = ThreadSampler.stableActivity(of: owner)
    let isMainThread = owner == ThreadID.mainThread
    let inRunLoop = isMainThread && MainRunLoop.isRunning
    let name =
      inRunLoop
      ? "\(owner) (the main thread, in RunLoop.main)"
      : isMainThread ? "\(owner) (the main thread)" : "\(owner)"
    if let (holderWait, object) = holderWait {
      return (
        [
          "the main queue is held by \(name), which waits for \(object) in"
            + " \(holderWait.call)"
        ], "waiting goes on until that wait ends", false
      )
    }
    if isMainThread, !inRunLoop, !Watchdog.hasSeenMainQueueServed.load(ordering: .relaxed) {
      if case .polling = state.activity {
      } else {
        return (
          [
            "the main queue has never been served: the main thread has not started dispatchMain()"
              + " or RunLoop.main.run(); it is \(state)"
          ],
          "serve the main queue: call dispatchMain() or RunLoop.main.run() on the main thread",
          state.isBlockedOnLock
        )
      }
    }
    switch state.activity {
    case .blockedOnLock:
      return (
        [
          "the main queue is held by \(name), which is \(state)",
          "it is probably waiting for \(waiter), or for work that waits for it",
        ], hint, true
      )
    case .polling:
      return (
        [
          "the main queue is held by \(name), which is \(state): it runs an event loop that does"
            + " not serve the main queue (a nested run loop in another mode, or a non-Dispatch"
            + " event loop)"
        ],
        "let the main queue be served: RunLoop.main.run() in the default mode, or dispatchMain()",
        false
      )
    default:
      return (
        ["the main queue is held by \(name), which is \(state)"],
        "the hop runs when the main queue's current work returns", false
      )
    }
  }
}

extension Double {
  func formatted(decimals: Int) -> String {
    let scale = (0..<decimals).reduce(1.0) { value, _ in value * 10 }
    let rounded = (self * scale).rounded() / scale
    return "\(rounded)"
  }
}

extension Duration {
  var nanoseconds: Int64 {
    components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000
  }
}
