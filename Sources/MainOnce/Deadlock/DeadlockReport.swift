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
    /// A wait for the main queue has not made progress within the stall timeout. The report
    /// describes what the thread in the way is doing; the wait may still end.
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
  /// The report of a deadlock, one line per wait. `proven`: every wait on it showed that it is
  /// blocked, and the report stops the process unless `response` is `report` (under `service`,
  /// it says why serving cannot break it). Otherwise it runs through a wait MainOnce cannot see
  /// into, which may still end: a report, and waiting goes on.
  static func cycle(
    _ edges: [WaitGraph.Edge], proven: Bool, response: DeadlockDetection.Response
  ) -> DeadlockReport {
    var headline = "MainOnce: deadlock detected"
    if !proven {
      let unseen = edges.map(\.node).filter { $0.proof == .opaque || $0.proof == .timed }
      headline =
        "MainOnce: possible deadlock, not stopped: MainOnce cannot see into "
        + unseen.map(\.call).joined(separator: ", ") + ", which may still return"
    }
    var lines = [headline]
    for edge in edges {
      let wait = edge.node
      let holder = wait.holdsMainQueue ? " (holds the main queue)" : ""
      let blockers = edge.blockers.map { "\($0.rawValue)" }.joined(separator: ", ")
      lines.append(
        "  \(wait.thread)\(holder) waits for \(wait.waitsFor) in \(wait.call);"
          + " blocked by thread\(edge.blockers.count == 1 ? "" : "s") \(blockers)\(wait.reason)")
    }
    if proven && response == .service {
      let why =
        edges.contains { $0.node.waitsForMainQueueInitializer }
        ? "the main-queue wait on it cannot be interrupted to run the initializer: once blocked,"
          + " only DispatchSemaphore.wait(for:) and DispatchGroup.wait(for:) serve initializers"
        : "no MainOnce initializer on it waits to run on the main queue"
      lines.append("  the service policy cannot break this cycle: \(why)")
    }
    let involvesMainQueue = edges.contains {
      $0.node.holdsMainQueue || $0.node.reason == ", which holds the main queue"
    }
    lines.append(
      involvesMainQueue
        ? "hint: code that holds the main queue must not block on work that needs the main"
          + " queue. Use `await onceOnMain(token:)` or the completion form, which never block a"
          + " thread, or run the initializer before the main queue starts waiting."
        : "hint: each of these waits can end only after the next one has: none ever will. Don't"
          + " wait, inside once-only work, for work that waits for it.")
    return DeadlockReport(
      kind: .cycle, stopsProcess: proven && response != .report,
      text: lines.joined(separator: "\n"))
  }

  /// The word that a subject reported as stalled no longer keeps anyone waiting.
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
  /// Each report goes to the handler on a libdispatch overcommit queue of its own, outside every
  /// lock of MainOnce's: the caller never waits for it, so a handler that needs the main queue
  /// (say, to build a logger) blocks nobody, and a handler stuck on one report delays only that
  /// report. Before a stop, the caller waits for the handler up to the larger of a second and
  /// the stall timeout, then stops anyway.
  ///
  /// A report that stops the process is the `fatalError` message itself, so that it reaches
  /// whatever records the message of a crash, and its first line is the report's first line.
  func deliver(at site: CallSite?) {
    guard let handler = DeadlockDetection.reportHandler else {
      if stopsProcess { Diagnostics.fail(text, at: site) }
      return Platform.writeToStandardError(text + "\n")
    }
    let handled = DispatchSemaphore(value: 0)
    Platform.runOnOvercommitQueue {
      handler(self)
      handled.signal()
    }
    guard stopsProcess else { return }
    let bound = max(1_000_000_000, DeadlockDetection.Snapshot.current.stallTimeoutNanoseconds)
    if handled.wait(timeout: .now() + .nanoseconds(Int(clamping: bound))) == .timedOut {
      Platform.writeToStandardError(
        "MainOnce: the report handler has not returned within \(formatDuration(bound));"
          + " stopping without it\n")
    }
    Diagnostics.fail(text, at: site)
  }
}
