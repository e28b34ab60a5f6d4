import Foundation
import Testing

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

// Exit tests before Swift 6.2, whose Swift Testing has none (`#expect(processExitsWith:)`): the
// same test, its body run in a process of its own through ``FixtureProcess``. That process is
// this test runner again, running only the test that started it (`--filter`), with
// `MAINONCE_EXIT_TEST` naming the call site: there `expectProcessExit` runs the body, and ends
// the process as an exit test's ends, with success if the body returns, with failure if it
// throws. The parent checks the exit status as `#expect(processExitsWith:)` does, and hands
// back what the body printed (not what the test runner printed before it).
#if !compiler(>=6.2)
  /// The exit status an exit test expects, as Swift Testing's `ExitTest.Condition` has it.
  enum ExpectedExit: CustomStringConvertible {
    /// Exit status 0.
    case success
    /// Anything else: a non-zero status or a signal.
    case failure

    var description: String { self == .success ? "success" : "failure" }
  }

  /// What an exit test's process printed and how it ended, as `ExitTest.Result` has it.
  struct ExitOutcome: Sendable {
    /// The exit status, or 128 + the signal that ended the process.
    let status: Int32
    let standardOutputContent: [UInt8]
    let standardErrorContent: [UInt8]
  }

  private let exitTestVariable = "MAINONCE_EXIT_TEST"
  /// Printed by the exit test's process right before the body runs.
  private let bodyMarker = "\u{1}MAINONCE_EXIT_TEST_BODY\n"

  /// Runs `body` in a process of its own and records an issue unless that process ends as
  /// `expected`; returns how it ended, or `nil` if it could not be run. `argument` tells apart
  /// the cases of a parameterized test, which all reach the same call site.
  @discardableResult
  func expectProcessExit(
    _ expected: ExpectedExit,
    argument: String = "",
    function: String = #function,
    fileID: String = #fileID,
    line: Int = #line,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: @Sendable () async throws -> Void
  ) async -> ExitOutcome? {
    let site = "\(fileID):\(line):\(argument)"
    if let running = ProcessInfo.processInfo.environment[exitTestVariable] {
      // In an exit test's process: run the body if it is this call site's, and end.
      guard running == site else { return nil }
      FileHandle.standardOutput.write(Data(bodyMarker.utf8))
      FileHandle.standardError.write(Data(bodyMarker.utf8))
      do {
        try await body()
      } catch {
        FileHandle.standardError.write(Data("exit test body threw: \(error)\n".utf8))
        exit(EXIT_FAILURE)
      }
      exit(EXIT_SUCCESS)
    }
    let name = String(function.prefix { $0 != "(" })
    let outcome: FixtureProcess.Outcome
    do {
      outcome = try await FixtureProcess.run(
        FixtureProcess.testRunner, ["--testing-library", "swift-testing", "--filter", name],
        environment: [exitTestVariable: site], timeout: .seconds(60))
    } catch {
      Issue.record(
        "the exit test's process did not start: \(error)", sourceLocation: sourceLocation)
      return nil
    }
    guard !outcome.timedOut else {
      Issue.record(
        "the exit test's process did not end in time: \(outcome.standardError)",
        sourceLocation: sourceLocation)
      return nil
    }
    guard let output = outcome.standardOutput.range(of: bodyMarker),
      let error = outcome.standardError.range(of: bodyMarker)
    else {
      Issue.record(
        "the exit test's process never ran its body (exit \(outcome.status)): \(outcome.standardError)",
        sourceLocation: sourceLocation)
      return nil
    }
    let ended = outcome.status == 0 ? ExpectedExit.success : .failure
    #expect(
      ended == expected, "the exit test's process exited \(outcome.status), not with \(expected)",
      sourceLocation: sourceLocation)
    return ExitOutcome(
      status: outcome.status,
      standardOutputContent: Array(outcome.standardOutput[output.upperBound...].utf8),
      standardErrorContent: Array(outcome.standardError[error.upperBound...].utf8))
  }
#endif
