import Logging
import MainOnce
import Synchronization
import Testing

@testable import LoggingRecipe

/// Keeps what is logged, for the test to read.
struct RecordingLogHandler: LogHandler {
  struct Entry: Sendable {
    let level: Logger.Level
    let message: String
    let metadata: Logger.Metadata
  }

  let recorder: Recorder
  var metadata: Logger.Metadata = [:]
  var logLevel: Logger.Level = .trace

  subscript(metadataKey key: String) -> Logger.Metadata.Value? {
    get { metadata[key] }
    set { metadata[key] = newValue }
  }

  func log(event: LogEvent) {
    let entry = Entry(
      level: event.level, message: "\(event.message)", metadata: event.metadata ?? [:])
    recorder.entries.withLock { $0.append(entry) }
  }
}

final class Recorder: Sendable {
  let entries = Mutex<[RecordingLogHandler.Entry]>([])
}

@Test("a report reaches the logger with its fields as metadata")
func reportIsLogged() throws {
  let recorder = Recorder()
  routeReports(to: Logger(label: "mainonce") { _ in RecordingLogHandler(recorder: recorder) })
  let report = DeadlockReport(
    kind: .stall, text: "MainOnce: thread 42 has waited 1.0 s in onceOnMain(token:)",
    callSite: .init(fileID: "App/Setup.swift", line: 12), threads: [42], label: "audio")
  let handler = try #require(DeadlockDetection.reportHandler)
  handler(report)
  let entry = try #require(recorder.entries.withLock { $0.first })
  #expect(entry.level == .warning)
  #expect(entry.message == report.text)
  #expect(entry.metadata["mainonce.kind"] == "stall")
  #expect(entry.metadata["mainonce.call_site"] == "App/Setup.swift:12")
  #expect(entry.metadata["mainonce.threads"] == .array(["42"]))
  #expect(entry.metadata["mainonce.label"] == "audio")
}
