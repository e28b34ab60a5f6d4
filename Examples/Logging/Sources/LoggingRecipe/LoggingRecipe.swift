import Logging
import MainOnce

/// Sends every report of MainOnce's to `logger`, with its fields as metadata.
func routeReports(to logger: Logger) {
  DeadlockDetection.reportHandler = { report in
    var metadata: Logger.Metadata = ["mainonce.kind": "\(report.kind)"]
    if let site = report.callSite { metadata["mainonce.call_site"] = "\(site)" }
    if !report.threads.isEmpty {
      metadata["mainonce.threads"] = .array(report.threads.map { "\($0)" })
    }
    if let label = report.label { metadata["mainonce.label"] = "\(label)" }
    let level: Logger.Level =
      if report.stopsProcess {
        .critical  // the process stops once the handler returns
      } else if report.kind == .stallEnded {
        .info
      } else {
        .warning  // a cycle that is not stopped, a stall, a warning, a kind added later
      }
    logger.log(level: level, "\(report.text)", metadata: metadata)
  }
}
