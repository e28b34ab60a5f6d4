/// What a blocked thread waits for.
enum WaitObject {
  /// A cell's initializer: running on some thread, or to be run by a hop to the main queue.
  case flight(UnsafeRawPointer)
  /// A thread, queue or unit of work named by a tracked wait.
  case target(WaitTarget)
}

/// One edge of the wait-for graph: a thread blocked on something, since when, from where.
struct BlockedWait {
  let object: WaitObject
  let operation: StaticString
  /// Where the wait was called; for a ``MainLazy``, where it was declared.
  let site: CallSite
  /// Whether `site` is the caller's (not so for `MainLazy.value`, a property).
  let siteIsCaller: Bool
  /// Whether the waiting thread holds the main queue while it waits.
  let holdsMainQueue: Bool
  let since: UInt64 = Platform.monotonicNanoseconds()
  /// Set once the watchdog has reported this wait as stalled.
  var stallReported = false

  init(
    object: WaitObject, operation: StaticString, site: CallSite, siteIsCaller: Bool = true,
    holdsMainQueue: Bool
  ) {
    self.object = object
    self.operation = operation
    self.site = site
    self.siteIsCaller = siteIsCaller
    self.holdsMainQueue = holdsMainQueue
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
}

/// One line of a cycle: `waiter` is blocked in `wait` by `blocker`.
struct CycleEdge {
  let waiter: ThreadID
  let wait: BlockedWait
  let blocker: Blocker
}

extension Registry {
  /// Records that `thread` is about to block in `wait`, and returns the cycle the wait closes,
  /// if any.
  mutating func beginWait(_ wait: BlockedWait, on thread: ThreadID, checkingCycles: Bool)
    -> [CycleEdge]?
  {
    let cycle = checkingCycles ? cycle(closedBy: wait, on: thread) : nil
    waits[thread] = wait
    return cycle
  }

  /// The labels of the cells in flight, for reports.
  var labels: [UnsafeRawPointer: CellLabel] {
    flights.mapValues(\.cell.label)
  }

  /// Records that `thread` is about to block until `cell`'s initializer has run, checking for
  /// a cycle and waking the watchdog as `detection` says.
  mutating func beginWait(
    for cell: OnceCell, site: CallSite, on thread: ThreadID,
    detection: DeadlockDetection.Settings
  ) -> DeadlockReport? {
    let wait = BlockedWait(
      object: .flight(cell.key), operation: cell.label.operation, site: site,
      siteIsCaller: cell.label.hasCallSites, holdsMainQueue: false)
    let cycle = beginWait(wait, on: thread, checkingCycles: detection.cycleResponse != .ignore)
    if detection.stallResponse != .ignore { Watchdog.watch(&self) }
    return cycle.map {
      DeadlockReport.cycle($0, labels: labels, stops: detection.cycleResponse == .abort)
    }
  }

  /// Removes `thread`'s wait, returning it.
  mutating func endWait(on thread: ThreadID) -> BlockedWait? {
    waits.removeValue(forKey: thread)
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
  func cycle(closedBy wait: BlockedWait, on thread: ThreadID) -> [CycleEdge]? {
    var path: [CycleEdge] = []
    var visited: Set<ThreadID> = [thread]

    func follow(_ waiter: ThreadID, _ wait: BlockedWait) -> Bool {
      for blocker in blockers(
        of: wait.object, asking: thread, askerHoldsMainQueue: wait.holdsMainQueue)
      {
        path.append(CycleEdge(waiter: waiter, wait: wait, blocker: blocker))
        if blocker.thread == thread { return true }
        if visited.insert(blocker.thread).inserted, let next = waits[blocker.thread],
          follow(blocker.thread, next)
        {
          return true
        }
        path.removeLast()
      }
      return false
    }
    return follow(thread, wait) ? path : nil
  }

  /// The threads that must make progress before a wait on `object` can end.
  ///
  /// `asker` is the thread about to wait; in the fallback where the main queue's owner cannot
  /// be read, it counts as holding the main queue if `askerHoldsMainQueue`.
  func blockers(of object: WaitObject, asking asker: ThreadID, askerHoldsMainQueue: Bool)
    -> [Blocker]
  {
    switch object {
    case .flight(let key):
      guard let flight = flights[key] else { return [] }
      if let runner = flight.runner {
        return [Blocker(thread: runner.thread, reason: ", which runs it")]
      }
      return mainQueueHolders(asker: asker, askerHoldsMainQueue: askerHoldsMainQueue)
    case .target(let target):
      switch target.kind {
      case .thread(let thread):
        return [Blocker(thread: thread, reason: "")]
      case .queue(let queue) where QueueOwnership.isMainQueue(queue):
        return mainQueueHolders(asker: asker, askerHoldsMainQueue: askerHoldsMainQueue)
      case .queue(let queue):
        guard case .thread(let owner) = QueueOwnership.owner(of: queue) else { return [] }
        return [Blocker(thread: owner, reason: ", which runs that queue")]
      case .work(let id, _):
        return (performers[id] ?? [:]).keys.sorted { $0.rawValue < $1.rawValue }.map {
          Blocker(thread: $0, reason: ", which performs it")
        }
      }
    }
  }

  /// The thread holding the main queue: read from libdispatch where possible, otherwise every
  /// blocked thread that held it when it started waiting.
  func mainQueueHolders(asker: ThreadID, askerHoldsMainQueue: Bool) -> [Blocker] {
    let reason = ", which holds the main queue"
    switch QueueOwnership.ownerOfMainQueue() {
    case .thread(let owner):
      return [Blocker(thread: owner, reason: reason)]
    case .nobody:
      return []
    case .unknown:
      var holders = waits.filter { $0.value.holdsMainQueue }.map(\.key)
      if askerHoldsMainQueue { holders.append(asker) }
      return holders.map { Blocker(thread: $0, reason: reason) }
    }
  }
}
