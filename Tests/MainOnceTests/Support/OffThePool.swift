import Foundation

@testable import MainOnce

/// Runs `work`, a test's long synchronous computation (an exhaustive exploration, parsing the
/// documentation, thousands of objects), in the calling test's own task but on a thread kept for
/// such work, not on Swift's cooperative pool.
///
/// The pool has one thread per CPU: two on CI's machines. Swift Testing runs every test on it,
/// and a synchronous test keeps its pool thread until it returns. Two long computations there
/// leave no thread for the others: a test whose initializer holds the main queue until the
/// test's task signals it then holds it until a computation ends, and every test waiting for the
/// main queue waits as long. On a loaded machine that was tens of seconds, past the tests' own
/// bounds. Here such work runs on threads kept for it, one computation per CPU at a time, and the
/// pool is left to the tests that wait for something.
///
/// It is the same task, so `#expect` and `Issue.record` in `work` are the calling test's.
func offThePool<Result, Failure: Error>(
  _ work: () throws(Failure) -> Result
) async throws(Failure) -> Result {
  try await withTaskExecutorPreference(LongWorkExecutor.shared) { () throws(Failure) in try work() }
}

/// The executor behind ``offThePool(_:)``: one thread per CPU, which take the jobs given to
/// them in turn. A test's computation is one job (it does not suspend), so each runs to its end;
/// more computations than threads wait for one, rather than all share the CPUs with the tests
/// that wait on time.
private final class LongWorkExecutor: TaskExecutor {
  static let shared = LongWorkExecutor()

  // A pthread mutex, not `Mutex`: ThreadSanitizer does not see the futex `Mutex` locks with on
  // Linux, and reported its accesses as races.
  private let jobs = Locked<[UnownedJob]>([])
  private let enqueued = DispatchSemaphore(value: 0)

  private init() {
    for index in 0..<ProcessInfo.processInfo.activeProcessorCount {
      let thread = Thread { [self] in
        while true {
          enqueued.wait()
          let job = jobs.withLock { $0.removeFirst() }
          job.runSynchronously(on: asUnownedTaskExecutor())
        }
      }
      thread.name = "MainOnceTests long work \(index)"
      thread.start()
    }
  }

  func enqueue(_ job: consuming ExecutorJob) {
    let job = UnownedJob(job)
    jobs.withLock { $0.append(job) }
    enqueued.signal()
  }
}
