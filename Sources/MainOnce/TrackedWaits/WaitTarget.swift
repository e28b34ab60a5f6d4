public import Dispatch
internal import Synchronization

/// Whom a blocking wait depends on: the thread, serial queue or unit of work that must make
/// progress before the wait can end.
///
/// Pass a target to a tracked wait, such as ``withTrackedWait(for:file:line:_:)`` or
/// `DispatchSemaphore.wait(for:file:line:)`, so that MainOnce's deadlock detector can see the
/// wait. When main-queue code waits for a target while that target waits for the main queue,
/// MainOnce stops the process with a report naming every edge of the cycle, instead of hanging.
///
/// ```swift
/// func deadlockOnPurpose() {
///   DispatchQueue.main.async {
///     let loader = WaitTarget.work("loader")
///     let done = DispatchSemaphore(value: 0)
///     DispatchQueue.global().async {
///       loader.perform {
///         render(Pictures.stack.value)  // needs the main queue
///       }
///       done.signal()
///     }
///     done.wait(for: loader)  // on the main queue: a deadlock, stopped within 100 ms
///   }
/// }
/// ```
public struct WaitTarget: Sendable, CustomStringConvertible {
  /// Identifies one unit of work.
  struct WorkID: Hashable, Sendable {
    let rawValue: UInt64
  }

  enum Kind: Sendable {
    case thread(ThreadID)
    case queue(DispatchQueue)
    case work(WorkID, name: String)
  }

  let kind: Kind

  /// The calling thread. Capture it on the thread that will signal, and wait for it elsewhere.
  public static var currentThread: WaitTarget {
    WaitTarget(kind: .thread(ThreadRecord.current.id))
  }

  /// Whichever thread is running `queue` at the time: a serial queue's work, or the queue
  /// itself for `queue.sync`.
  ///
  /// `DispatchQueue.main` names the thread that holds the main queue. A concurrent queue is
  /// rejected with a message: it does not name one thread; use ``work(_:)`` for the work you
  /// wait for instead.
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

  /// What a wait for this target waits for now.
  var blockers: Blockers {
    switch kind {
    case .thread(let thread):
      return .thread(thread, reason: "")
    case .queue(let queue) where QueueOwnership.isMainQueue(queue):
      return .mainQueue
    case .queue(let queue):
      guard case .thread(let owner) = QueueOwnership.owner(of: queue) else { return .none }
      return .thread(owner, reason: ", which runs that queue")
    case .work(let id, _):
      let threads = Self.performers.withLock { $0[id].map { Array($0.keys) } ?? [] }
      return .anyOf(
        threads.sorted { $0.rawValue < $1.rawValue }, reason: ", which performs it")
    }
  }

  /// The target as reports name it: `thread 4711`, `queue "db"`, `work "loader"`.
  public var description: String {
    switch kind {
    case .thread(let thread): "\(thread)"
    case .queue(let queue):
      QueueOwnership.isMainQueue(queue) ? "the main queue" : "queue \"\(queue.label)\""
    case .work(_, let name): "work \"\(name)\""
    }
  }
}
