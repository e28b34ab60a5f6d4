internal import Synchronization

/// What a blocked thread waits for.
enum WaitObject: Sendable {
  /// A cell's initializer, for the caller `Waiter`: running on some thread, or to be run by a
  /// hop to the main queue.
  case flight(Flight, Waiter)
  /// A thread, queue or unit of work named by a tracked wait.
  case target(WaitTarget)
}

/// Marked by a thread as soon as its tracked wait is over, before it takes the registry's lock
/// to remove the wait: a wait that has ended is never taken for part of a cycle while its
/// thread has yet to get the lock.
final class WaitEnd: Sendable {
  private let marked = Atomic(false)

  var isMarked: Bool { marked.load(ordering: .acquiring) }

  func mark() { marked.store(true, ordering: .releasing) }
}

/// One edge of the wait-for graph: a thread blocked on something, from where.
struct BlockedWait: Sendable {
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
  /// Whether the thread goes straight from recording the wait into the blocking call: so for
  /// every wait but ``withTrackedWait(for:file:line:_:)``, whose body may compute first, or
  /// never block at all. A cycle that such a wait closes is proven only once its thread sleeps
  /// in it, as for another thread's tracked wait.
  let blocksOnEntry: Bool
  /// Set for a main-queue wait that serves initializers while it waits (the `service`
  /// policy): a cycle through it is broken by waking it, not reported.
  var desk: ServiceDesk?
  /// For a tracked wait: marked by its thread as soon as the wait is over. (A flight wait is
  /// over once its caller is resolved, which happens under the registry's lock.)
  let end: WaitEnd?

  init(
    object: WaitObject, operation: StaticString, site: CallSite, siteIsCaller: Bool = true,
    holdsMainQueue: Bool, hasDeadline: Bool = false, blocksOnEntry: Bool = true
  ) {
    self.object = object
    self.operation = operation
    self.site = site
    self.siteIsCaller = siteIsCaller
    self.holdsMainQueue = holdsMainQueue
    self.hasDeadline = hasDeadline
    self.blocksOnEntry = blocksOnEntry
    end = if case .target = object { WaitEnd() } else { nil }
  }

  /// Whether the wait is known to be over, though its thread has not removed it yet: a flight
  /// wait whose caller has been resolved, a tracked wait that has returned. Under the lock.
  var isOver: Bool {
    switch object {
    case .flight(_, let waiter): waiter.resolution != nil
    case .target: end!.isMarked
    }
  }

  /// Whether the wait can be part of a proven cycle: it has no deadline, and it is not over.
  /// Under the lock.
  var canBeInCycle: Bool { !hasDeadline && !isOver }

  /// Whether `thread`, which recorded this wait, is sure to be blocked in it: a flight wait is
  /// (its caller is released only under the lock); a tracked wait, if its thread is asleep
  /// and the wait is not over. A thread released from a tracked wait is runnable from the
  /// moment it is released until it has marked the wait's end; one on its way into the wait
  /// runs until it sleeps in it. So the kernel's word that the thread sleeps, read before the
  /// mark, rules both out. `false` where the kernel does not say.
  func isSurelyBlocked(on thread: ThreadID) -> Bool {
    guard let end else { return true }
    return ThreadSampler.isAsleep(thread) == true && !end.isMarked
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
enum Cycle: Sendable {
  /// Report it, and stop the process if the report says so.
  case report(DeadlockReport)
  /// A main-queue wait on the cycle serves initializers: wake it, and it runs the one in the way.
  case serviced(ServiceDesk)
  /// A thread on the cycle is in a tracked wait but not asleep in it: it may have been released
  /// and not yet have removed the wait, or not yet be asleep (the thread that closed the cycle,
  /// if its wait does not block on entry). Look again.
  case unsure(BlockedWait, on: ThreadID, response: DeadlockDetection.Response)

  /// How long an unsure cycle is looked at again, a millisecond at a time, before it is taken
  /// for no cycle: a thread released from a wait, or entering one, gets there in microseconds.
  static let unsureLooks = 100

  /// Reports the cycle or wakes the wait that serves it, once sure of it, unless `recheck`
  /// finds that the caller's own wait need not block after all. After the lock is released.
  ///
  /// An unsure cycle is looked at again until it is sure or gone. One that stays unsure (a
  /// thread on it keeps running inside its tracked wait) is not proof of a deadlock; the
  /// watchdog reports it if it keeps callers waiting.
  func handle(at site: CallSite, recheck: (() -> Bool)? = nil) {
    var cycle = self
    for _ in 0..<Self.unsureLooks {
      guard case .unsure(let wait, let thread, let response) = cycle else { break }
      Platform.sleep(microseconds: 1_000)
      guard let again = Registry.shared.withLock({ $0.cycle(closedBy: wait, on: thread, response) })
      else { return }
      cycle = again
    }
    if recheck?() == true { return }
    switch cycle {
    case .report(let report): report.deliver(at: site)
    case .serviced(let desk): desk.wake()
    case .unsure: return
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
    let previous = waits.updateValue(wait, forKey: thread)
    return (previous, response != .off ? cycle(closedBy: wait, on: thread, response) : nil)
  }

  /// Records that `thread` is about to block until `waiter`'s flight has run an initializer,
  /// checking for a cycle as `response` says.
  mutating func beginWait(
    for flight: Flight, as waiter: Waiter, on thread: ThreadID,
    response: DeadlockDetection.Response
  ) -> (previous: BlockedWait?, cycle: Cycle?) {
    let wait = BlockedWait(
      object: .flight(flight, waiter), operation: flight.label.operation, site: waiter.site,
      siteIsCaller: flight.label.hasCallSites, holdsMainQueue: false)
    return beginWait(wait, on: thread, response: response)
  }

  /// What to do about the cycle that `thread`'s recorded `wait` closes, as `response` says:
  /// report it, or, under the `service` policy, wake the main-queue wait on the cycle that
  /// serves initializers; `unsure` while a thread on it is not surely blocked in its wait.
  func cycle(
    closedBy wait: BlockedWait, on thread: ThreadID, _ response: DeadlockDetection.Response
  ) -> Cycle? {
    guard let cycle = cycle(closedBy: wait, on: thread) else { return nil }
    guard
      cycle.allSatisfy({
        ($0.waiter == thread && $0.wait.blocksOnEntry) || $0.wait.isSurelyBlocked(on: $0.waiter)
      })
    else { return .unsure(wait, on: thread, response: response) }
    guard response == .service else {
      return .report(DeadlockReport.cycle(cycle, stops: response != .report))
    }
    // Serviced only if the cycle runs through a main-queue wait that serves initializers, and
    // through an initializer it can run: one waiting for the main queue, with nobody running it.
    let desk = cycle.compactMap(\.wait.desk).first
    let hasServiceableFlight = cycle.contains {
      if case .flight(let flight, _) = $0.wait.object { flight.awaitsMainQueue } else { false }
    }
    if let desk, hasServiceableFlight { return .serviced(desk) }
    let why =
      hasServiceableFlight
      ? "the main-queue wait on it cannot be interrupted to run the initializer: once blocked,"
        + " only DispatchSemaphore.wait(for:) and DispatchGroup.wait(for:) without a deadline"
        + " serve initializers"
      : "no MainOnce initializer on it waits to run on the main queue"
    return .report(
      DeadlockReport.cycle(
        cycle, stops: true, note: "the service policy cannot break this cycle: \(why)"))
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
    guard wait.canBeInCycle else { return nil }
    let holdsMainQueue = wait.holdsMainQueue
    var mayCycle = false
    forEachBlocker(of: wait, asker: thread, askerHoldsMainQueue: holdsMainQueue) { blocker in
      mayCycle =
        blocker.thread == thread || waits[blocker.thread]?.canBeInCycle == true
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
          next.canBeInCycle
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
  /// `asker` is the thread whose wait is being checked; where the main queue's owner cannot be
  /// read, it counts as holding the main queue if `askerHoldsMainQueue`.
  func forEachBlocker(
    of wait: BlockedWait, asker: ThreadID, askerHoldsMainQueue: Bool,
    _ body: (Blocker) -> Bool
  ) {
    switch wait.object {
    case .flight(let flight, _):
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
      for (thread, wait) in waits where wait.holdsMainQueue && !wait.isOver && thread != asker {
        if !body(Blocker(thread: thread, reason: reason)) { return }
      }
    }
  }
}
