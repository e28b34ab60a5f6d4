internal import Dispatch

/// A finding of MainOnce's deadlock detector, as delivered to a report handler or to standard
/// error.
///
/// Every report's ``text`` starts with `MainOnce:`. A cycle report lists one line per edge of
/// the wait-for graph, in the shape of PostgreSQL's deadlock report ("thread A waits for X;
/// blocked by thread B"), then a hint.
public struct DeadlockReport: Sendable, CustomStringConvertible {
  /// What kind of finding a report is.
  public enum Kind: Sendable, Equatable {
    /// A wait would close a cycle in the wait-for graph: it can never end.
    case cycle
    /// A wait for the main queue has not made progress within the stall timeout. The watchdog
    /// describes what the main queue is doing; the wait may still end.
    case stall
    /// A wait reported as a stall has ended after all.
    case stallEnded
  }

  /// What kind of finding this is.
  public let kind: Kind

  /// Whether MainOnce stops the process after delivering this report.
  public let stopsProcess: Bool

  /// The report, one or more lines, starting with `MainOnce:`.
  public let text: String

  /// The report's ``text``.
  public var description: String { text }
}

extension DeadlockReport {
  /// The report of a proven `cycle`, as `response` treats it: it stops the process unless
  /// `response` is `report`; under `service`, it says why the policy cannot break the cycle.
  static func cycle(_ cycle: [CycleEdge], response: DeadlockDetection.Response) -> DeadlockReport {
    var note: String?
    if response == .service {
      let hasServiceableSubject = cycle.contains {
        if case .subject(let subject, _) = $0.wait.object {
          subject.obstacle() == .mainQueue
        } else {
          false
        }
      }
      let why =
        hasServiceableSubject
        ? "the main-queue wait on it cannot be interrupted to run the initializer: once blocked,"
          + " only DispatchSemaphore.wait(for:) and DispatchGroup.wait(for:) without a deadline"
          + " serve initializers"
        : "no MainOnce initializer on it waits to run on the main queue"
      note = "the service policy cannot break this cycle: \(why)"
    }
    var lines = ["MainOnce: deadlock detected"]
    for edge in cycle {
      let holder = edge.wait.holdsMainQueue ? " (holds the main queue)" : ""
      lines.append(
        "  \(edge.waiter)\(holder) waits for \(edge.wait.waitsFor) in \(edge.wait.call);"
          + " blocked by \(edge.blocker.thread)\(edge.blocker.reason)")
    }
    if let note { lines.append("  " + note) }
    let involvesMainQueue = cycle.contains {
      $0.wait.holdsMainQueue || $0.blocker.reason == Blocker.holdsMainQueue
    }
    lines.append(
      involvesMainQueue
        ? "hint: code that holds the main queue must not block on work that needs the main"
          + " queue. Use `await onceOnMain(token:)` or the completion form, which never block a"
          + " thread, or run the initializer before the main queue starts waiting."
        : "hint: each of these waits can end only after the next one has: none ever will. Don't"
          + " wait, inside once-only work, for work that waits for it.")
    return DeadlockReport(
      kind: .cycle, stopsProcess: response != .report, text: lines.joined(separator: "\n"))
  }

  /// The watchdog's word that a subject it reported no longer keeps anyone waiting.
  static func stallEnded(of label: CellLabel, finished: Bool, waitingSince: UInt64)
    -> DeadlockReport
  {
    let waited = formatDuration(Platform.monotonicNanoseconds() &- waitingSince)
    return DeadlockReport(
      kind: .stallEnded, stopsProcess: false,
      text: finished
        ? "MainOnce: the \(label.work) of \(label) finished after \(waited); its callers go on"
        : "MainOnce: no caller waits for the \(label.work) of \(label) any more, after \(waited)")
  }

  /// Hands the report to the report handler, or writes it to standard error, and stops the
  /// process if it says so, attributing the stop to `site`.
  ///
  /// A handler runs on a thread of MainOnce's own, one report at a time, in order: the caller
  /// never waits for it, so a handler that needs the main queue (say, to build a logger) cannot
  /// block the watchdog or a waiting thread. Before a stop, the caller waits for the handler up
  /// to the larger of a second and the stall timeout, then stops anyway.
  ///
  /// A report that stops the process is the `fatalError` message itself, so that it reaches
  /// whatever records the message of a crash, and its first line is the report's first line.
  func deliver(at site: CallSite?) {
    guard let handler = DeadlockDetection.reportHandler else {
      if stopsProcess { Diagnostics.fail(text, at: site) }
      return Platform.writeToStandardError(text + "\n")
    }
    guard stopsProcess else { return ReportHandlerThread.submit { handler(self) } }
    let handled = DispatchSemaphore(value: 0)
    ReportHandlerThread.submit {
      handler(self)
      handled.signal()
    }
    let bound = max(1_000_000_000, DeadlockDetection.Snapshot.current.stallTimeoutNanoseconds)
    if handled.wait(timeout: .now() + .nanoseconds(Int(clamping: bound))) == .timedOut {
      Platform.writeToStandardError(
        "MainOnce: the report handler has not returned within \(formatDuration(bound));"
          + " stopping without it\n")
    }
    Diagnostics.fail(text, at: site)
  }
}

/// The thread that runs report handlers, one report at a time, in the order they came.
enum ReportHandlerThread {
  private static let pending = Locked<(jobs: [@Sendable () -> Void], isStarted: Bool)>(([], false))
  private static let ready = DispatchSemaphore(value: 0)

  static func submit(_ job: @escaping @Sendable () -> Void) {
    let start = pending.withLock { pending -> Bool in
      pending.jobs.append(job)
      defer { pending.isStarted = true }
      return !pending.isStarted
    }
    ready.signal()
    if start, Platform.startThread({ run() }) != 0 {
      Platform.writeToStandardError("MainOnce: cannot start the report handler's thread\n")
    }
  }

  private static func run() -> Never {
    while true {
      ready.wait()
      let job = pending.withLock { $0.jobs.isEmpty ? nil : $0.jobs.removeFirst() }
      job?()
    }
  }
}
