/// What a blocked thread waits for.
enum WaitObject {
  /// A cell's initializer: running on some thread, or to be run by a hop to the main queue.
  case flight(Flight)
  /// A thread, queue or unit of work named by a tracked wait.
  case target(WaitTarget)
}

/// One edge of the wait-for graph: a thread blocked on something, from where.
struct BlockedWait {
  let object: WaitObject
  let operation: StaticString
  /// Where the wait was called; for a ``MainLazy``, where it was declared.
  let site: CallSite
  /// Whether `site` is the caller's (not so for `MainLazy.value`, a property).
  let siteIsCaller: Bool
  /// Whether the waiting thread holds the main queue while it waits.
  let holdsMainQueue: Bool
  /// Whether the wait ends by itself at a deadline. Such a wait can be in a report, but never
  /// in a proof: it will end, and everything waiting on it can go on.
  let hasDeadline: Bool
  /// Set for a main-queue wait that serves initializers while it waits (the `service`
  /// policy): a cycle through it is broken by waking it, not reported.
  var desk: ServiceDesk?

  init(
    object: WaitObject, operation: StaticString, site: CallSite, siteIsCaller: Bool = true,
    holdsMainQueue: Bool, hasDeadline: Bool = false
  ) {
    self.object = object
    self.operation = operation
    self.site = site
    self.siteIsCaller = siteIsCaller
    self.holdsMainQueue = holdsMainQueue
    self.hasDeadline = hasDeadline
  }

  /// The blocking call, for reports: `onceOnMain(token:) at App/Store.swift:31`.
  var call: String {
    siteIsCaller ? "\(operation) at \(site)" : "\(operation)"
  }
}

/// A thread that a wait depends on, and how.
struct Blocker {
  let thread: ThreadID
  /// Why this thread blocks the wait, as the end of a report line: ", which holds the main queue".
  let reason: String

  static let holdsMainQueue = ", which holds the main queue"
}

/// What to do about a cycle a wait closes.
enum Cycle {
  /// Report it, and stop the process if the report says so.
  case report(DeadlockReport)
  /// A main-queue wait on the cycle serves initializers: wake it, and it runs the one in the way.
  case serviced(ServiceDesk)

  /// Reports the cycle or wakes the wait that serves it. After the registry lock is released.
  func handle(at site: CallSite) {
    switch self {
    case .report(let report): report.deliver(at: site)
    case .serviced(let desk): desk.wake()
    }
  }
}

/// One line of a cycle: `waiter` is blocked in `wait` by `blocker`.
struct CycleEdge {
  let waiter: ThreadID
  let wait: BlockedWait
  let blocker: Blocker
}

extension Registry {
  /// Records that `thread` is about to block in `wait`. Returns the wait it replaces (a thread
  /// can wait inside code it runs while another of its waits is recorded: an initializer run by
  /// its own hop) and what to do about the cycle the wait closes, if any, as `response` says:
  /// report it, or, under the `service` policy, wake the main-queue wait on the cycle that
  /// serves initializers.
  mutating func beginWait(
    _ wait: BlockedWait, on thread: ThreadID, response: DeadlockDetection.Response
  ) -> (previous: BlockedWait?, cycle: Cycle?) {
    let cycle = response != .off ? cycle(closedBy: wait, on: thread) : nil
    let previous = waits.updateValue(wait, forKey: thread)
    guard let cycle else { return (previous, nil) }
    guard response == .service else {
      return (previous, .report(DeadlockReport.cycle(cycle, stops: response != .report)))
    }
    // Serviced only if the cycle runs through a main-queue wait that serves initializers, and
    // through an initializer it can run: one waiting for the main queue, with nobody running it.
    let desk = cycle.compactMap { waits[$0.waiter]?.desk }.first
    let hasServiceableFlight = cycle.contains {
      if case .flight(let flight) = $0.wait.object { flight.awaitsMainQueue } else { false }
    }
    if let desk, hasServiceableFlight { return (previous, .serviced(desk)) }
    let why =
      hasServiceableFlight
      ? "the main-queue wait on it cannot be interrupted to run the initializer: once blocked,"
        + " only DispatchSemaphore.wait(for:) and DispatchGroup.wait(for:) without a deadline"
        + " serve initializers"
      : "no MainOnce initializer on it waits to run on the main queue"
    return (
      previous,
      .report(
        DeadlockReport.cycle(
          cycle, stops: true, note: "the service policy cannot break this cycle: \(why)"))
    )
  }

  /// Records that `thread` is about to block until `flight`'s initializer has run, checking
  /// for a cycle as `detection` says.
  mutating func beginWait(
    for flight: Flight, site: CallSite, on thread: ThreadID,
    detection: DeadlockDetection.Snapshot
  ) -> (previous: BlockedWait?, cycle: Cycle?) {
    let wait = BlockedWait(
      object: .flight(flight), operation: flight.label.operation, site: site,
      siteIsCaller: flight.label.hasCallSites, holdsMainQueue: false)
    return beginWait(wait, on: thread, response: detection.cycleResponse)
  }

  /// Ends `thread`'s wait, putting back the one it replaced.
  mutating func endWait(on thread: ThreadID, restoring previous: BlockedWait?) {
    waits[thread] = previous
  }

  mutating func beginPerforming(_ work: WaitTarget.WorkID, on thread: ThreadID) {
    performers[work, default: [:]][thread, default: 0] += 1
  }

  mutating func endPerforming(_ work: WaitTarget.WorkID, on thread: ThreadID) {
    performers[work]?[thread]? -= 1
    if performers[work]?[thread] == 0 { performers[work]?[thread] = nil }
    if performers[work]?.isEmpty == true { performers[work] = nil }
  }

  /// The chain of waits that leads from `wait` back to `thread`, if there is one: then `thread`
  /// would wait for itself.
  ///
  /// The common case, where nothing `wait` depends on is itself waiting, returns without
  /// allocating.
  func cycle(closedBy wait: BlockedWait, on thread: ThreadID) -> [CycleEdge]? {
    if wait.hasDeadline { return nil }
    let holdsMainQueue = wait.holdsMainQueue
    var mayCycle = false
    forEachBlocker(of: wait, asker: thread, askerHoldsMainQueue: holdsMainQueue) { blocker in
      mayCycle =
        blocker.thread == thread || waits[blocker.thread].map { !$0.hasDeadline } ?? false
      return !mayCycle
    }
    guard mayCycle else { return nil }

    var path: [CycleEdge] = []
    var visited: Set<ThreadID> = [thread]
    func follow(_ waiter: ThreadID, _ wait: BlockedWait) -> Bool {
      var found = false
      forEachBlocker(of: wait, asker: thread, askerHoldsMainQueue: holdsMainQueue) { blocker in
        path.append(CycleEdge(waiter: waiter, wait: wait, blocker: blocker))
        if blocker.thread == thread { found = true }
        if !found, visited.insert(blocker.thread).inserted, let next = waits[blocker.thread],
          !next.hasDeadline
        {
          found = follow(blocker.thread, next)
        }
        if !found { path.removeLast() }
        return !found
      }
      return found
    }
    return follow(thread, wait) ? path : nil
  }

  /// Calls `body` with each thread that must make progress before `wait` can end, until `body`
  /// returns `false`.
  ///
  /// `asker` is the thread about to wait (its wait is not recorded yet); where the main queue's
  /// owner cannot be read, it counts as holding the main queue if `askerHoldsMainQueue`.
  func forEachBlocker(
    of wait: BlockedWait, asker: ThreadID, askerHoldsMainQueue: Bool,
    _ body: (Blocker) -> Bool
  ) {
    switch wait.object {
    case .flight(let flight):
      if let runner = flight.runner {
        _ = body(Blocker(thread: runner.thread, reason: ", which runs it"))
      } else if flight.awaitsMainQueue {
        forEachMainQueueHolder(asker: asker, askerHoldsMainQueue: askerHoldsMainQueue, body)
      }
    case .target(let target):
      switch target.kind {
      case .thread(let thread):
        _ = body(Blocker(thread: thread, reason: ""))
      case .queue(let queue) where QueueOwnership.isMainQueue(queue):
        forEachMainQueueHolder(asker: asker, askerHoldsMainQueue: askerHoldsMainQueue, body)
      case .queue(let queue):
        guard case .thread(let owner) = QueueOwnership.owner(of: queue) else { return }
        _ = body(Blocker(thread: owner, reason: ", which runs that queue"))
      case .work(let id, _):
        for thread in (performers[id] ?? [:]).keys.sorted(by: { $0.rawValue < $1.rawValue }) {
          if !body(Blocker(thread: thread, reason: ", which performs it")) { return }
        }
      }
    }
  }

  /// The threads holding the main queue: read from libdispatch where possible, otherwise every
  /// blocked thread that held it when it started waiting.
  private func forEachMainQueueHolder(
    asker: ThreadID, askerHoldsMainQueue: Bool, _ body: (Blocker) -> Bool
  ) {
    let reason = Blocker.holdsMainQueue
    switch QueueOwnership.ownerOfMainQueue() {
    case .thread(let owner):
      _ = body(Blocker(thread: owner, reason: reason))
    case .nobody:
      return
    case .unknown:
      if askerHoldsMainQueue, !body(Blocker(thread: asker, reason: reason)) { return }
      for (thread, wait) in waits where wait.holdsMainQueue && thread != asker {
        if !body(Blocker(thread: thread, reason: reason)) { return }
      }
    }
  }
}
