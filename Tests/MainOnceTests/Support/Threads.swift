import Foundation
import MainOnceFixtureSupport
import Testing

/// Runs `body(index)` on `count` new threads released at the same moment, and waits at most
/// `timeout` for all of them, without blocking a Swift concurrency thread. Returns `false`
/// (and records an issue) if they did not finish in time.
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
      finished.wait(timeout: .now() + timeout.seconds) == .success
    } ?? false
  if !inTime {
    Issue.record("threads did not finish within \(timeout)", sourceLocation: sourceLocation)
  }
  return inTime
}

/// Runs blocking work on a new thread, so that tests never block the cooperative pool (on
/// Linux, libdispatch adds a worker for blocked ones only about once a second), and waits at
/// most `timeout` for it. On timeout it records an issue and returns `nil`, leaving the thread
/// to finish on its own, so that a hang fails the test instead of the run.
func onThread<Result: Sendable>(
  timeout: Duration = .seconds(30),
  sourceLocation: SourceLocation = #_sourceLocation,
  _ work: @escaping @Sendable () -> Result
) async -> Result? {
  let outcome = try? await withinTimeLimit(timeout, sourceLocation: sourceLocation) {
    await withCheckedContinuation { continuation in
      Thread { continuation.resume(returning: work()) }.start()
    }
  }
  return outcome.flatMap { $0 }
}

/// Waits for `semaphore` for at most `timeout`, off the cooperative pool.
func wait(
  for semaphore: DispatchSemaphore, timeout: Duration = .seconds(10),
  sourceLocation: SourceLocation = #_sourceLocation
) async -> Bool {
  let signalled =
    await onThread(timeout: timeout + .seconds(5)) {
      semaphore.wait(timeout: .now() + timeout.seconds) == .success
    } ?? false
  if !signalled { Issue.record("timed out after \(timeout)", sourceLocation: sourceLocation) }
  return signalled
}

extension Duration {
  var seconds: Double {
    Double(components.seconds) + Double(components.attoseconds) / 1e18
  }
}

/// Ends an exit test's child process if it has not ended within `seconds`, so that a hang fails
/// the test (exit status 3, and not the message the test expects) instead of stalling the run.
func boundExitTest(seconds: UInt32 = 10) {
  Thread {
    sleep(seconds)
    FileHandle.standardError.write(Data("exit test timed out after \(seconds) s\n".utf8))
    exit(3)
  }.start()
}
