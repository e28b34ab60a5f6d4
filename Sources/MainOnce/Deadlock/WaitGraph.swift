internal import Synchronization

/// One edge of the wait-for graph: a thread blocked, or about to block, in a wait MainOnce can
/// see, and what shows that it still is.
///
/// The thread that records a wait marks its end (``ended``) as soon as the wait returns, before
/// it takes the detector's lock to remove it; its other marks likewise. The detector reads them
/// without the thread's help, and only trusts a wait as part of a proof on the evidence that
/// ``Evidence`` describes.
final class RecordedWait: @unchecked Sendable {
  // This is safe because every `let` is immutable, the marks are atomics, and `previous` is
  // only read and written under the detector's lock.

  /// What the thread waits for.
  enum Object: Sendable {
    /// A once-cell, for the caller whose wait ends with `ending`.
    case subject(any WaitSubject, any WaitEnding)
    /// A thread, queue or unit of work named by a tracked wait.
    case target(WaitTarget)
  }

  /// What shows that the thread is still blocked in the very wait it recorded.
  enum Evidence {
    /// A wait for a once-cell: the caller is resolved, under the cell's lock, before it wakes,
    /// so until then it waits.
    case resolution
    /// A semaphore or group wait, or a serviced wait's desk: between recording the wait and
    /// marking its end the thread sleeps nowhere else, so asleep in `futex` (and not running in
    /// between two readings) is asleep in the wait.
    case sleepsInWait
    /// `trackedSync`: asleep in `futex` before its work has started (``entered``).
    case syncOnQueue
    /// `withTrackedWait`: its closure may sleep anywhere and still return. Only a thread in
    /// `futex` that has not run at all for a whole stall timeout counts.
    case opaque
  }

  let thread: ThreadID
  let object: Object
  let operation: StaticString
  /// Where the wait was called; for a ``MainLazy``, where it was declared.
  let site: CallSite
  /// Whether `site` is the caller's (not so for `MainLazy.value`, a property).
  let siteIsCaller: Bool
  /// Whether the waiting thread holds the main queue while it waits.
  let holdsMainQueue: Bool
  /// Whether the wait ends by itself at a deadline: then it is never part of a proof.
  let hasDeadline: Bool
  let evidence: Evidence
  /// Set for a main-queue wait that serves initializers while it waits (the `service` policy):
  /// waking it breaks a cycle through it.
  let desk: ServiceDesk?

  /// Set by the thread as soon as the wait is over.
  let ended = Atomic(false)
  /// Set by `trackedSync` when its work starts: the wait for the queue is over.
  let entered = Atomic(false)
  /// Odd while the thread is inside the blocking call itself (the semaphore's or group's wait,
  /// the desk's park, the `sync`, the `withTrackedWait` closure): bumped on the way in and on
  /// the way out. A thread asleep anywhere else (in a lock on its way into the wait, in an
  /// initializer it serves in place) is not asleep in the wait.
  let blocking = Atomic<UInt>(0)

  /// The wait this one is nested in, on the same thread; under the detector's lock.
  var previous: RecordedWait?

  init(
    on thread: ThreadID, object: Object, operation: StaticString, site: CallSite,
    siteIsCaller: Bool = true, holdsMainQueue: Bool, hasDeadline: Bool = false,
    evidence: Evidence, desk: ServiceDesk? = nil
  ) {
    self.thread = thread
    self.object = object
    self.operation = operation
    self.site = site
    self.siteIsCaller = siteIsCaller
    self.holdsMainQueue = holdsMainQueue
    self.hasDeadline = hasDeadline
    self.evidence = evidence
    self.desk = desk
  }

  /// Whether the wait is known to be over, though its thread may not have removed it yet.
  var isOver: Bool {
    if ended.load(ordering: .acquiring) || entered.load(ordering: .acquiring) { return true }
    if case .subject(_, let ending) = object { return ending.hasEnded }
    return false
  }

  /// Whether the wait can be part of a cycle: it has no deadline, and it is not over.
  var canBeInCycle: Bool { !hasDeadline && !isOver }

  /// Runs `body`, the blocking call itself, marked as such.
  func blocking<Result, Failure: Error>(
    _ body: () throws(Failure) -> Result
  ) throws(Failure) -> Result {
    blocking.add(1, ordering: .releasing)
    defer { blocking.add(1, ordering: .releasing) }
    return try body()
  }

  /// The blocking call, for reports: `onceOnMain(token:) at App/Store.swift:31`.
  var call: String {
    siteIsCaller ? "\(operation) at \(site)" : "\(operation)"
  }

  /// What the wait is for, as the object of "waits for …".
  var waitsFor: String {
    switch object {
    case .subject(let subject, _):
      if case .object(let objectType, _, _) = subject.label {
        "the \(subject.label.work) for the same \(objectType)"
      } else {
        "the \(subject.label.work) of \(subject.label)"
      }
    case .target(let target):
      "\(target)"
    }
  }
}

/// A thread that a wait depends on, and how.
struct Blocker: Equatable {
  let thread: ThreadID
  /// Why this thread blocks the wait, as the end of a report line: ", which holds the main queue".
  let reason: String

  static let holdsMainQueue = ", which holds the main queue"
}

/// One line of a cycle: `waiter` is blocked in `wait` by `blocker`.
struct CycleEdge {
  let waiter: ThreadID
  let wait: RecordedWait
  let blocker: Blocker
}

extension DetectorState {
  /// The chain of waits that leads from `wait` back to its own thread, if there is one: then
  /// the thread would wait for itself. Only waits that can be part of a cycle are followed.
  ///
  /// The common case, where nothing `wait` depends on is itself waiting, returns without
  /// allocating.
  func cycle(closedBy wait: RecordedWait) -> [CycleEdge]? {
    guard wait.canBeInCycle else { return nil }
    let origin = wait.thread
    var mayCycle = false
    forEachBlocker(of: wait) { blocker in
      mayCycle = blocker.thread == origin || activeWait(of: blocker.thread)?.canBeInCycle == true
      return !mayCycle
    }
    guard mayCycle else { return nil }

    var path: [CycleEdge] = []
    var visited: Set<ThreadID> = [origin]
    func follow(_ wait: RecordedWait) -> Bool {
      var found = false
      forEachBlocker(of: wait) { blocker in
        path.append(CycleEdge(waiter: wait.thread, wait: wait, blocker: blocker))
        if blocker.thread == origin { found = true }
        if !found, visited.insert(blocker.thread).inserted,
          let next = activeWait(of: blocker.thread),
          next.canBeInCycle
        {
          found = follow(next)
        }
        if !found { path.removeLast() }
        return !found
      }
      return found
    }
    return follow(wait) ? path : nil
  }

  /// Calls `body` with each thread that must make progress before `wait` can end, until `body`
  /// returns `false`.
  func forEachBlocker(of wait: RecordedWait, _ body: (Blocker) -> Bool) {
    switch wait.object {
    case .subject(let subject, _):
      switch subject.obstacle() {
      case .runner(let thread, _): _ = body(Blocker(thread: thread, reason: ", which runs it"))
      case .mainQueue: forEachMainQueueHolder(asker: wait, body)
      case .builder, .nothing: return
      }
    case .target(let target):
      switch target.kind {
      case .thread(let thread):
        _ = body(Blocker(thread: thread, reason: ""))
      case .queue(let queue) where QueueOwnership.isMainQueue(queue):
        forEachMainQueueHolder(asker: wait, body)
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

  /// The threads holding the main queue: read from libdispatch where possible; otherwise every
  /// thread whose recorded wait says it held the main queue when it started waiting.
  private func forEachMainQueueHolder(asker: RecordedWait, _ body: (Blocker) -> Bool) {
    let reason = Blocker.holdsMainQueue
    switch QueueOwnership.ownerOfMainQueue() {
    case .thread(let owner):
      _ = body(Blocker(thread: owner, reason: reason))
    case .nobody:
      return
    case .unknown:
      if asker.holdsMainQueue, !body(Blocker(thread: asker.thread, reason: reason)) { return }
      for wait in activeWaits where wait.thread != asker.thread && wait.holdsMainQueue {
        if !body(Blocker(thread: wait.thread, reason: reason)) { return }
      }
    }
  }

  /// Whether `blocker` still blocks `wait`, as the graph and the main queue say now.
  func stillBlocks(_ blocker: Blocker, _ wait: RecordedWait) -> Bool {
    var found = false
    forEachBlocker(of: wait) { candidate in
      found = candidate == blocker
      return !found
    }
    return found
  }
}
