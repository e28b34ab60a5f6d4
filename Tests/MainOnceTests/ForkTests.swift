import MainOnceFixtureSupport
import Testing

/// A process forked by a single-threaded parent (a prefork server) uses MainOnce: libdispatch
/// names the thread that forked by its id in the parent, and MainOnce must still know that
/// thread holds the main queue. Each scenario runs in `MainOnceFixture fork <scenario>`, which
/// forks; the parent bounds the child.
@Suite("A forked child knows its main thread holds the main queue")
struct ForkTests {
  @Test(
    "top-level code in a forked child runs its initializer in place, without a layout warning",
    arguments: ["mainAfterWorker", "mainFirst", "usedBeforeFork"])
  func forkedChildRunsInPlace(_ scenario: String) async throws {
    let outcome = try await FixtureProcess.run(
      "MainOnceFixture", ["fork", scenario], timeout: .seconds(30))
    #expect(!outcome.timedOut, "\(outcome.standardOutput)\(outcome.standardError)")
    #expect(outcome.status == 0, "\(outcome.standardOutput)\(outcome.standardError)")
    #expect(
      outcome.standardOutput.contains(
        "PASS top-level code in the child ran its initializer; main context: true"),
      "\(outcome.standardOutput)\(outcome.standardError)")
    #expect(outcome.standardOutput.contains("CHILD exited 0"), "\(outcome.standardOutput)")
    #expect(!outcome.standardError.contains("self-test"), "\(outcome.standardError)")
    if scenario != "mainFirst" {
      #expect(outcome.standardOutput.contains("WORKER in main context: false"))
    }
  }

  /// libdispatch's worker threads are gone in the child, and its global queues never run work
  /// there: MainOnce stops at its first use, naming the call, instead of waiting forever.
  @Test("a child forked after libdispatch started worker threads stops at first use with a message")
  func forkedAfterDispatchWorkersStops() async throws {
    let outcome = try await FixtureProcess.run(
      "MainOnceFixture", ["fork", "afterDispatchWorkers"], timeout: .seconds(30))
    #expect(!outcome.timedOut, "\(outcome.standardOutput)\(outcome.standardError)")
    #expect(outcome.standardOutput.contains("CHILD signal"), "\(outcome.standardOutput)")
    let site = try #require(
      outcome.standardOutput.split(separator: "\n").first { $0.hasPrefix("CALLSITE ") }?
        .dropFirst("CALLSITE ".count), "\(outcome.standardOutput)")
    #expect(
      outcome.standardError.contains("MainOnce: this process was forked"),
      "\(outcome.standardError)")
    #expect(outcome.standardError.contains(String(site)), "\(outcome.standardError)")
  }
}

extension ForkTests {
  /// A child forked by a thread other than the main thread has no thread to run main-queue work:
  /// MainOnce stops at its first use, naming the call, instead of waiting forever for the
  /// parent's main thread.
  @Test("a child forked from a thread other than the main thread stops at first use with a message")
  func forkedFromThreadStops() async throws {
    let outcome = try await FixtureProcess.run(
      "MainOnceFixture", ["fork", "fromThread"], timeout: .seconds(30))
    #expect(!outcome.timedOut, "\(outcome.standardOutput)\(outcome.standardError)")
    // Stopped by MainOnce, not by the child's alarm (SIGALRM, 14) after a hang.
    #expect(outcome.standardOutput.contains("CHILD signal"), "\(outcome.standardOutput)")
    #expect(!outcome.standardOutput.contains("CHILD signal 14"), "\(outcome.standardOutput)")
    #expect(!outcome.standardOutput.contains("INITIALIZER"), "\(outcome.standardOutput)")
    let site = try #require(
      outcome.standardOutput.split(separator: "\n").first { $0.hasPrefix("CALLSITE ") }?
        .dropFirst("CALLSITE ".count), "\(outcome.standardOutput)")
    let stderr = outcome.standardError
    #expect(
      stderr.contains("MainOnce: this process was forked by a thread other than its parent's"),
      "\(stderr)")
    #expect(stderr.contains("Fork from the main thread, or call exec in the child"), "\(stderr)")
    #expect(stderr.contains("and the call at \(site) is MainOnce's first use"), "\(stderr)")
    // One message, and no report about the parent's threads.
    #expect(
      stderr.split(separator: "MainOnce:", omittingEmptySubsequences: false).count == 2, "\(stderr)"
    )
    #expect(!stderr.contains("has waited"), "\(stderr)")
  }
}
