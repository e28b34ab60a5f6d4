internal import Dispatch

#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Musl)
  internal import Musl
#elseif canImport(Darwin)
  internal import Darwin
#endif

// Where a report goes: to the report handler, on a queue of its own, or to standard error; and a
// report that stops the process stops it. What a report says is `Reporting/`'s; this is the
// plumbing under it.
extension DeadlockReport {
  /// The report handler, ``DeadlockDetection/reportHandler``: `nil` writes reports to standard
  /// error.
  static let handler = Locked<(@Sendable (DeadlockReport) -> Void)?>(nil)

  /// Hands the report to the report handler, or writes it to standard error, and stops the
  /// process if it says so, attributing the stop to `site`, which also becomes the report's
  /// ``callSite`` unless it names one.
  ///
  /// Each report goes to the handler on a libdispatch overcommit queue of its own, outside every
  /// lock of MainOnce's: the caller never waits for it, so a handler that needs the main queue
  /// (say, to build a logger) blocks nobody, and a handler stuck on one report delays only that
  /// report. Before a stop, the caller waits for the handler up to `patience` nanoseconds (the
  /// deadlock detector, which makes every report that stops, passes the larger of a second and
  /// the stall timeout), then stops anyway.
  ///
  /// A report that stops the process is the `fatalError` message itself, so that it reaches
  /// whatever records the message of a crash, and its first line is the report's first line.
  func deliver(at site: CallSite?, patience: UInt64 = 1_000_000_000) {
    var report = self
    if report.callSite == nil, let site {
      report.callSite = SourceLocation(fileID: "\(site.file)", line: site.line)
    }
    guard let handler = Self.handler.withLock({ $0 }) else {
      if stopsProcess { Diagnostics.fail(text, at: site) }
      return Self.writeToStandardError(text + "\n")
    }
    let handled = DispatchSemaphore(value: 0)
    Platform.runOnOvercommitQueue { [report] in
      handler(report)
      handled.signal()
    }
    guard stopsProcess else { return }
    if handled.wait(timeout: .now() + .nanoseconds(Int(clamping: patience))) == .timedOut {
      Self.writeToStandardError(
        "MainOnce: the report handler has not returned within \(formatDuration(patience));"
          + " stopping without it\n")
    }
    Diagnostics.fail(text, at: site)
  }

  /// Writes to standard error without buffering, so a report is out before a crash.
  private static func writeToStandardError(_ text: String) {
    var text = text
    text.withUTF8 { bytes in
      var offset = 0
      while offset < bytes.count {
        let written = write(2, bytes.baseAddress! + offset, bytes.count - offset)
        if written < 0 && errno == EINTR { continue }
        // Standard error is closed or full: there is nowhere else to say anything.
        if written <= 0 { return }
        offset += written
      }
    }
  }
}
