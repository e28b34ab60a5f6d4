public import Dispatch
internal import Synchronization
internal import _CMainOnceShims

/// Whom a blocking wait depends on: the thread, serial queue or unit of work that must make
/// progress before the wait can end.
///
/// Pass a target to a tracked wait, such as `DispatchSemaphore.wait(for:file:line:)` or
/// ``withTrackedWait(for:file:line:_:)``, so that MainOnce's deadlock detector can see the
/// wait. Each target comes with a contract: who may end a wait for it. Where that is a closed
/// set of threads that MainOnce can name, a deadlock through the wait is *proven*: when
/// main-queue code waits for the target while the target waits for the main queue, MainOnce
/// stops the process with a report naming every edge of the cycle, instead of hanging. Where it
/// is not, the deadlock is *reported* ("MainOnce: possible deadlock, not stopped"), and waiting
/// goes on, since a thread MainOnce cannot name may still end the wait.
///
/// | Target | Contract: the wait is ended by | A deadlock through it |
/// | --- | --- | --- |
/// | ``queue(_:file:line:)`` of a serial queue | work running on that queue | is proven: only the thread running the queue can run that work |
/// | ``queue(_:file:line:)`` of a queue made with a target, active | work running on that queue, once every serial queue up its target chain is free | is proven through the chain, up to an inactive or retargetable link or a concurrent queue |
/// | the main queue from main context, a queue the waiter runs (or one on its chain), ``currentThread`` captured on the waiter outside dispatch work | work only the waiting thread could run | is proven by the wait alone |
/// | ``currentThread``, captured on a thread of the program's own | code on that thread | is proven: the thread runs one thing after another |
/// | ``currentThread``, captured in dispatch work (a queue's block, a `Task`) | code on that thread | is reported: the pool thread may run other jobs, and another thread may run the one that signals |
/// | ``work(_:)`` | whichever thread does the work, whenever | is reported: a thread that does not perform it now may still end the wait |
///
/// ```swift
/// func deadlockOnPurpose() {
///   DispatchQueue.main.async {
///     let loader = DispatchQueue(label: "loader")
///     let done = DispatchSemaphore(value: 0)
///     loader.async {
///       render(Pictures.stack.value)  // needs the main queue
///       done.signal()
///     }
///     done.wait(for: .queue(loader))  // on the main queue: a deadlock, stopped within 100 ms
///   }
/// }
/// ```
public struct WaitTarget: Sendable, CustomStringConvertible {
  /// Identifies one unit of work.
  struct WorkID: Hashable, Sendable {
    let rawValue: UInt64
  }

  enum Kind: Sendable {
    /// A thread; `inDispatchWork`: captured while it ran work libdispatch gave it.
    case thread(ThreadID, inDispatchWork: Bool)
    case queue(DispatchQueue)
    case work(WorkID, name: String)
  }

  let kind: Kind

  /// The calling thread. Capture it on the thread that will signal, and wait for it elsewhere.
  ///
  /// Its contract: only code on this thread ends a wait for it. Captured on a thread of the
  /// program's own (the main thread, a `Thread`, a pthread), outside any `sync` it runs, a
  /// deadlock through such a wait is proven and stopped: the thread runs one thing after
  /// another, so while it is blocked, nothing on it can signal. Captured in dispatch work (a
  /// block on a queue, a `Task`, an iteration of `concurrentPerform`), the thread is one of
  /// libdispatch's pool: it may run other jobs later, while the job that signals runs on
  /// another thread, so a deadlock through such a wait is only reported. A thread of the
  /// program's own that waits for its own target waits for itself, and is stopped. To have a
  /// deadlock through dispatch work stopped, wait for the serial queue whose work signals
  /// instead (``queue(_:file:line:)``).
  public static var currentThread: WaitTarget {
    let thread = ThreadRecord.current.id
    // The main thread runs only the program's own code, also while it serves the main queue.
    let inDispatchWork = thread != .mainThread && mainonce_runs_dispatch_work()
    return WaitTarget(kind: .thread(thread, inDispatchWork: inDispatchWork))
  }

  /// Whichever thread is running `queue` at the time: a serial queue's work, or the queue
  /// itself for `queue.sync`.
  ///
  /// Its contract: work on `queue` ends a wait for it (a block that signals). A deadlock
  /// through such a wait is proven and stopped: while the thread running `queue` is blocked,
  /// no other work of the queue can run. `DispatchQueue.main` names the thread that holds the
  /// main queue. The queue's work also waits for every serial queue up its target chain (a
  /// queue made with `target:`), up to an inactive or retargetable link or a concurrent queue,
  /// where MainOnce stops reading. A wait for what only the waiting thread could run (the main
  /// queue from main context, a queue whose work the waiter runs) is stopped on its own. A
  /// concurrent queue is rejected with a message: it does not name one thread.
  /// Without queue introspection (see <doc:MainOnLinux>) MainOnce cannot read who runs a queue
  /// other than the main queue, and such a wait is on no deadlock it can see.
  ///
  /// - Parameters:
  ///   - queue: A serial queue.
  ///   - file: The caller's file, for the misuse message; leave the default.
  ///   - line: The caller's line, for the misuse message; leave the default.
  /// - Returns: A target for whichever thread runs `queue`.
  public static func queue(
    _ queue: DispatchQueue, file: StaticString = #fileID, line: UInt = #line
  ) -> WaitTarget {
    if QueueOwnership.isKnownConcurrent(queue) {
      Diagnostics.fail(
        """
        MainOnce: WaitTarget.queue(_:) needs a serial queue, and "\(queue.label)" is \
        concurrent: it does not name one thread to wait for. Name the work you wait for with \
        WaitTarget.work(_:) and run it inside perform(_:).
        """,
        at: CallSite(file: file, line: line))
    }
    return WaitTarget(kind: .queue(queue))
  }

  /// A new, named unit of work. Run the work inside ``perform(file:line:_:)`` on whatever
  /// thread does it, and wait for the target where you wait for the work.
  ///
  /// Its contract: whichever thread does the work ends a wait for it, whenever it does. A
  /// wait for work is an *or*-wait, blocked only while every thread performing the work is, and
  /// a thread that performs the work it waits for is never its own blocker. But the threads
  /// that perform it at one moment are not all that ever will: another may start later, or
  /// signal after its `perform` returned. So a deadlock through a wait for work is reported,
  /// naming the threads performing it, and never stopped. For a deadlock that is stopped, wait
  /// for the serial queue that does the work (``queue(_:file:line:)``).
  public static func work(_ name: String) -> WaitTarget {
    WaitTarget(
      kind: .work(WorkID(rawValue: nextWorkID.add(1, ordering: .relaxed).newValue), name: name))
  }

  private static let nextWorkID = Atomic<UInt64>(0)

  /// Runs `body` as this unit of work: while it runs, a wait for this target depends on the
  /// calling thread. Only targets made by ``work(_:)`` can be performed.
  ///
  /// - Parameters:
  ///   - file: The caller's file, for the misuse message; leave the default.
  ///   - line: The caller's line, for the misuse message; leave the default.
  ///   - body: The work.
  /// - Returns: What `body` returns.
  /// - Throws: What `body` throws.
  @discardableResult
  public func perform<Result, Failure: Error>(
    file: StaticString = #fileID,
    line: UInt = #line,
    _ body: () throws(Failure) -> Result
  ) throws(Failure) -> Result {
    guard case .work(let id, _) = kind else {
      Diagnostics.fail(
        """
        MainOnce: perform(_:) runs work for a target made by WaitTarget.work(_:); \(self) is \
        not one. A thread or a queue is waited for as it is.
        """,
        at: CallSite(file: file, line: line))
    }
    let thread = ThreadRecord.current.id
    Self.performers.withLock { $0[id, default: [:]][thread, default: 0] += 1 }
    defer {
      Self.performers.withLock { performers in
        performers[id]?[thread]? -= 1
        if performers[id]?[thread] == 0 { performers[id]?[thread] = nil }
        if performers[id]?.isEmpty == true { performers[id] = nil }
      }
    }
    return try body()
  }

  /// The threads performing each unit of work, with how many times over (`perform` nests).
  private static let performers = Locked<[WorkID: [ThreadID: Int]]>([:])

  /// What a wait for this target, by `waiter`, waits for now. `holdsMainQueue`: the wait began
  /// in main context, as recorded where the main queue's owner cannot be read. `isSync`: the
  /// wait of a `trackedSync`, for which libdispatch may hold links of the queue's chain for the
  /// waiter already, while it waits for the next: those are no blockers.
  ///
  /// A queue's work runs only once every held serial link of its target chain is released, so
  /// each link's holder is a sound blocker (the nearest is named), and a link the waiter holds
  /// makes a semaphore or group wait one that only the waiter could end.
  func blockers(of waiter: ThreadID, holdsMainQueue: Bool, isSync: Bool) -> Blockers {
    switch kind {
    case .thread(let thread, let inDispatchWork):
      // Captured in dispatch work, the thread may run another job that signals: no blocker.
      if thread == waiter {
        return inDispatchWork ? .none : .itself(reason: Self.onlyThisThread(""))
      }
      return .thread(thread, reason: "")
    case .queue(let queue) where QueueOwnership.isMainQueue(queue):
      guard !isSync else { return .mainQueue }
      switch QueueOwnership.ownerOfMainQueue() {
      case .thread(waiter):
        return .itself(reason: Self.onlyThisThread(", which holds the main queue"))
      case .unknown where holdsMainQueue:
        return .itself(
          reason: Self.onlyThisThread(", which held the main queue when it began to wait"))
      default: return .mainQueue
      }
    case .queue(let queue):
      guard let chain = QueueOwnership.chain(of: queue) else { return .none }
      if !isSync, let mine = chain.held.first(where: { $0.holder == waiter }) {
        return .itself(reason: Self.onlyThisThread(Self.runs(mine)))
      }
      guard let nearest = chain.held.first(where: { $0.holder != waiter }) else { return .none }
      return .thread(nearest.holder, reason: Self.runs(nearest))
    case .work(let id, _):
      let threads = Self.performers.withLock { $0[id].map { Array($0.keys) } ?? [] }
      return .anyOf(
        threads.sorted { $0.rawValue < $1.rawValue }, reason: ", which performs it")
    }
  }

  /// The end of "blocked by thread N …" for a wait only its own thread could end.
  private static func onlyThisThread(_ holds: String) -> String {
    " (itself)\(holds): only this thread could run what would end the wait"
  }

  /// The end of "blocked by thread N …" for the holder of `link`.
  private static func runs(_ link: QueueOwnership.HeldLink) -> String {
    if link.isMainQueue { return ", which holds the main queue" }
    return link.isFirst
      ? ", which runs that queue" : ", which runs \(link.name), a target of that queue"
  }

  /// What a report naming a wait for this target should add: where the walk of a queue's target
  /// chain stopped, and why.
  var chainNote: String? {
    guard case .queue(let queue) = kind, !QueueOwnership.isMainQueue(queue),
      let stop = QueueOwnership.chain(of: queue)?.stop
    else { return nil }
    return "MainOnce reads \(self)'s target chain no further: \(stop)"
  }

  /// Why a deadlock through a wait for this target is not proven, as the end of "… waits for
  /// <target>, which …"; `nil` where every thread that may end the wait is known.
  var openness: String? {
    switch kind {
    case .thread(_, inDispatchWork: true):
      "was captured in dispatch work: another job may signal in that thread's place"
    case .work: "a thread that does not perform it now may still end"
    case .thread, .queue: nil
    }
  }

  /// The target as reports name it: `thread 4711`, `queue "db"`, `work "loader"`.
  public var description: String {
    switch kind {
    case .thread(let thread, _): "\(thread)"
    case .queue(let queue):
      QueueOwnership.isMainQueue(queue) ? "the main queue" : "queue \"\(queue.label)\""
    case .work(_, let name): "work \"\(name)\""
    }
  }
}
