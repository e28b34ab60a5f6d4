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
  /// Builds the report for a wait that would close `cycle`.
  static func cycle(_ cycle: [CycleEdge], stops: Bool, note: String? = nil) -> DeadlockReport {
    var lines = ["MainOnce: deadlock detected"]
    for edge in cycle {
      let holder = edge.wait.holdsMainQueue ? " (holds the main queue)" : ""
      lines.append(
        "  \(edge.waiter)\(holder) waits for \(describe(edge.wait.object))"
          + " in \(edge.wait.call);"
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
    return DeadlockReport(kind: .cycle, stopsProcess: stops, text: lines.joined(separator: "\n"))
  }

  /// Describes what a wait is for, as the object of "waits for …". A per-object cell is named
  /// without its call site, which the wait's own call names already.
  static func describe(_ object: WaitObject) -> String {
    switch object {
    case .flight(let flight, _):
      if case .object(let typeName, _, _) = flight.label {
        "the \(flight.label.work) for the same \(typeName)"
      } else {
        "the \(flight.label.work) of \(flight.label)"
      }
    case .target(let target):
      "\(target)"
    }
  }

  /// Hands the report to the report handler, or writes it to standard error, and stops the
  /// process if it says so, attributing the stop to `site`, the call that waits.
  ///
  /// A report that stops the process is the `fatalError` message itself, so that it reaches
  /// whatever records the message of a crash, and its first line is the report's first line.
  func deliver(at site: CallSite?) {
    if let handler = DeadlockDetection.reportHandler {
      handler(self)
    } else if !stopsProcess {
      Platform.writeToStandardError(text + "\n")
    }
    if stopsProcess { Diagnostics.fail(text, at: site) }
  }
}
