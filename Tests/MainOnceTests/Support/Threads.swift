import Foundation
import MainOnce
import MainOnceFixtureSupport
import Testing

/// Runs `body(index)` on `count` new threads released at the same moment, and waits at most
/// `timeout` (scaled, see ``TimeScale``) for all of them, without blocking a Swift concurrency
/// thread. Returns `false` (and records an issue) if they did not finish in time.
@discardableResult
func raceThreads(
  _ count: Int,
  timeout: Duration = .seconds(60),
  sourceLocation: SourceLocation = #_sourceLocation,
  _ body: @escaping @Sendable (Int) -> Void
) async -> Bool {
  let finished = DispatchGroup()
  let gate = StartGate(parties: count)
  for index in 0..<count {
    finished.enter()
    Thread {
      gate.arriveAndWait()
      body(index)
      finished.leave()
    }.start()
  }
  let inTime =
    await onThread(timeout: timeout + .seconds(5)) {
      finished.wait(timeout: .now() + timeout.scaled.seconds) == .success
    } ?? false
  if !inTime {
    Issue.record(
      "threads did not finish within \(timeout.scaled)", sourceLocation: sourceLocation)
  }
  return inTime
}

/// Runs blocking work on a new thread, so that tests never block the cooperative pool (on
/// Linux, libdispatch adds a worker for blocked ones only about once a second), and waits at
/// most `timeout` (scaled) for it. On timeout it records an issue and returns `nil`, leaving
/// the thread to finish on its own, so that a hang fails the test instead of the run.
///
/// The thread starts before this call first suspends, in the caller's own job: what it does
/// (release a hold of the main queue, for one) never waits for the cooperative pool, which a
/// loaded machine's other tests may keep busy for seconds. Only this task's resumption does.
func onThread<Result: Sendable>(
  timeout: Duration = .seconds(30),
  sourceLocation: SourceLocation = #_sourceLocation,
  _ work: @escaping @Sendable () -> Result
) async -> Result? {
  let answer = Slot<CheckedContinuation<Result?, Never>>()
  let outcome = await withCheckedContinuation { continuation in
    answer.put(continuation)
    Thread {
      let result = work()
      answer.take()?.resume(returning: result)
    }.start()
    DispatchQueue.global().asyncAfter(deadline: .now() + timeout.scaled.seconds) {
      answer.take()?.resume(returning: nil)
    }
  }
  guard let outcome else {
    Issue.record(notFinished(within: timeout), sourceLocation: sourceLocation)
    return nil
  }
  return outcome
}

/// Waits for `semaphore` for at most `timeout` (scaled), off the cooperative pool.
func wait(
  for semaphore: DispatchSemaphore, timeout: Duration = .seconds(10),
  sourceLocation: SourceLocation = #_sourceLocation
) async -> Bool {
  let signalled =
    await onThread(timeout: timeout + .seconds(5)) {
      semaphore.wait(timeout: .now() + timeout.scaled.seconds) == .success
    } ?? false
  if !signalled {
    Issue.record("timed out after \(timeout.scaled)", sourceLocation: sourceLocation)
  }
  return signalled
}

extension Duration {
  var seconds: Double {
    Double(components.seconds) + Double(components.attoseconds) / 1e18
  }
}

/// For an exit test that expects a stall: a stall timeout of half a second (scaled), and a
/// report handler that writes the first stall report to standard error after `REPORT ` and
/// ends the process. A subject is reported once, as its oldest caller passes the timeout, so
/// every caller the test expects in the report must have joined by then: the timeout is long
/// enough for a task or thread that the first caller starts to begin waiting on a loaded
/// machine (with 100 ms, under ThreadSanitizer beside eight CPU hogs, a report once came before
/// the second caller).
func exitAtTheFirstStallReport() {
  DeadlockDetection.stalls = .report(after: .milliseconds(500).scaled)
  DeadlockDetection.reportHandler = { report in
    guard report.kind == .stall else { return }
    FileHandle.standardError.write(Data("REPORT \(report.text)\n".utf8))
    exit(EXIT_FAILURE)
  }
}

/// Ends an exit test's child process if it has not ended within `seconds` (scaled), so that a
/// hang fails the test (exit status 3, and not the message the test expects) instead of
/// stalling the run. An exit test's child inherits the environment, and with it the time scale.
func boundExitTest(seconds: Double = 10) {
  let limit = TimeScale.seconds(seconds)
  Thread {
    Thread.sleep(forTimeInterval: limit)
    FileHandle.standardError.write(
      Data("exit test timed out after \(String(format: "%g", limit)) s\n".utf8))
    exit(3)
  }.start()
}
