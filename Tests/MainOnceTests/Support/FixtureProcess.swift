import Foundation
import Testing

/// Runs a scenario binary built next to the test bundle, with a time limit.
struct FixtureProcess {
  struct Outcome {
    let status: Int32
    let standardOutput: String
    let standardError: String
    let timedOut: Bool

    /// The `PASS`/`FAIL` line a fixture prints last.
    var verdict: String {
      standardOutput.split(separator: "\n").last(where: {
        $0.hasPrefix("PASS") || $0.hasPrefix("FAIL")
      }).map(String.init) ?? "(no verdict)"
    }

    /// The value of `key=` in the verdict line.
    func value(_ key: String) -> String? {
      verdict.split(separator: " ").first(where: { $0.hasPrefix(key + "=") })
        .map { String($0.dropFirst(key.count + 1)) }
    }
  }

  /// The directory that holds the test bundle and the fixture executables.
  static let productsDirectory: URL = {
    URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
  }()

  static func run(
    _ executable: String,
    _ arguments: [String],
    environment: [String: String] = [:],
    timeout: Duration = .seconds(30)
  ) async throws -> Outcome {
    let process = Process()
    process.executableURL = productsDirectory.appendingPathComponent(executable)
    process.arguments = arguments
    process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    let output = Pipe()
    let error = Pipe()
    process.standardOutput = output
    process.standardError = error
    let exited = DispatchSemaphore(value: 0)
    process.terminationHandler = { _ in exited.signal() }
    try process.run()
    // Drain both pipes while the process runs, so a chatty child cannot block on a full pipe.
    let outputData = ReadAll(output.fileHandleForReading)
    let errorData = ReadAll(error.fileHandleForReading)
    let timedOut = await onThread {
      guard exited.wait(timeout: .now() + timeout.seconds) == .timedOut else { return false }
      process.terminate()
      exited.wait()
      return true
    }
    return Outcome(
      status: process.terminationStatus,
      standardOutput: outputData.text(),
      standardError: errorData.text(),
      timedOut: timedOut)
  }
}

/// Reads a pipe to its end on a background thread.
private final class ReadAll: @unchecked Sendable {
  // This is safe because `data` is written by the reading thread before `done` is signalled and
  // read only after waiting for `done`.
  private var data = Data()
  private let done = DispatchSemaphore(value: 0)

  init(_ handle: FileHandle) {
    Thread {
      self.data = handle.readDataToEndOfFile()
      self.done.signal()
    }.start()
  }

  func text() -> String {
    done.wait()
    return String(decoding: data, as: UTF8.self)
  }
}
