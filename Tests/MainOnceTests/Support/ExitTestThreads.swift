import Foundation
import Testing

@testable import MainOnce

/// Runs a test with an exit test, and with it Swift Testing's handling of the child process, on
/// threads of its own instead of Swift's cooperative pool, with at most one such test per CPU in
/// flight.
///
/// While an exit test's child process runs, Swift Testing reads its standard output, standard
/// error and event channel to their ends (`FileHandle.readToEnd()`), each in a child task of the
/// test's task: a blocking read on a pool thread. The pool has one thread per CPU, two on CI's
/// machines, so one exit test in flight held all of it until its child ended, seconds on a loaded
/// machine; a test whose initializer holds the main queue until its own task signals then held
/// the main queue as long, and every test waiting for the main queue timed out behind it.
///
/// Child tasks inherit their parent's executor preference, so under this trait those reads block
/// threads of ``ExitTestThreads`` and the pool stays with the other tests. Off the pool nothing
/// bounds how many children start at once, so the trait does: one test per CPU, as the pool did,
/// so that children that wait for a report on time do not share the CPUs with dozens of others.
/// Every test with an exit test takes it (`ExitTestThreadsTests` checks). Swift Testing before
/// 6.2 has no exit tests: there `expectProcessExit(_:)` runs the child on a thread of its own,
/// and the trait does nothing.
struct ExitTestOffThePool: TestTrait {}

#if compiler(>=6.2)
  extension ExitTestOffThePool: TestScoping {
    func provideScope(
      for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
      await ExitTestThreads.slots.take()
      defer { ExitTestThreads.slots.give() }
      try await withTaskExecutorPreference(ExitTestThreads.shared) { try await function() }
    }
  }
#endif

extension Trait where Self == ExitTestOffThePool {
  /// This test has an exit test: see ``ExitTestOffThePool``.
  static var exitTest: Self { Self() }
}

/// An executor that runs each job on a new thread: jobs that block (reading a child process's
/// output) never wait for one another or for the pool. An exit test's handling is a few dozen
/// jobs, so a thread each costs nothing a test can notice.
final class ExitTestThreads: TaskExecutor {
  static let shared = ExitTestThreads()
  /// How many tests with an exit test may be in flight: one per CPU.
  static let slots = TaskSlots(ProcessInfo.processInfo.activeProcessorCount)

  /// Whether the calling code runs on one of these threads.
  static var isCurrent: Bool { Thread.current.threadDictionary[marker] != nil }
  private static let marker = "MainOnceTests.ExitTestThreads"

  private init() {}

  func enqueue(_ job: consuming ExecutorJob) {
    let job = UnownedJob(job)
    let executor = asUnownedTaskExecutor()
    Thread {
      Thread.current.threadDictionary[Self.marker] = true
      job.runSynchronously(on: executor)
    }.start()
  }
}
