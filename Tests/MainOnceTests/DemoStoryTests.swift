import Foundation
import Testing

/// The demo's diagnostic stories, run as a reader runs them from a terminal.
@Suite("The demo's diagnostic stories")
struct DemoStoryTests {
  @Test(
    "a story that MainOnce stops ends with MainOnce's message, not the runtime's backtrace",
    arguments: [
      (["reentrance"], "Reentrance.swift", "MainOnce: re-entrant call for token \"settings\""),
      (["deadlock", "cycle"], "DeadlockStories.swift", "MainOnce: deadlock detected"),
      (["deadlock", "abort"], "Stack.swift", "MainOnce: thread "),
    ])
  func storyEndsWithTheMessage(arguments: [String], stoppedIn file: String, message: String)
    async throws
  {
    // As a reader runs it: with the runtime's backtracer as it is by default, and standard
    // output and error in one stream, in the order they were written.
    let demo = FixtureProcess.productsDirectory.appendingPathComponent("MainOnceDemo").path
    let outcome = try await FixtureProcess.run(
      "/bin/sh", ["-c", #"unset SWIFT_BACKTRACE; exec "$0" "$@" 2>&1"#, demo] + arguments)
    let text = outcome.standardOutput
    #expect(!outcome.timedOut)
    #expect(outcome.status != 0, "\(text)")
    let report = try #require(stoppingReport(in: text, from: "MainOnceDemo/\(file)"), "\(text)")
    #expect(report.first?.hasPrefix(message) == true, "\(text)")
    // After the message's first line, only its own: the waits or call sites, and the hint.
    #expect(
      report.dropFirst().allSatisfy { $0.hasPrefix("  ") || $0.hasPrefix("hint: ") }, "\(text)")
    for trace in ["Current stack trace", "*** ", "Backtrac", "Thread 0"] {
      #expect(!text.contains(trace), "\(text)")
    }
  }
}
