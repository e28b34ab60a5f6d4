import Dispatch
import MainOnceFixtureSupport
import Synchronization
import Testing

@testable import MainOnce

/// Awaits `operation` for at most `limit` times the time scale (``TimeScale``). On timeout it
/// records an issue, cancels the operation and returns `nil` without waiting for it, so that a
/// lost continuation fails the test instead of hanging the run.
func withinTimeLimit<Value: Sendable>(
  _ limit: Duration = .seconds(10),
  sourceLocation: SourceLocation = #_sourceLocation,
  _ operation: @escaping @Sendable () async throws -> Value
) async throws -> Value? {
  let scaled = limit.scaled
  let outcome = Slot<CheckedContinuation<Value?, any Error>>()
  let timedOut = Slot<Bool>()
  let value = try await withCheckedThrowingContinuation { continuation in
    outcome.put(continuation)
    let task = Task {
      let result = await Result(catching: operation)
      outcome.take()?.resume(with: result.map { $0 })
    }
    DispatchQueue.global().asyncAfter(deadline: .now() + scaled.seconds) {
      guard let continuation = outcome.take() else { return }
      timedOut.put(true)
      task.cancel()
      continuation.resume(returning: nil)
    }
  }
  // Recorded here, in the test's own task, so that the issue names the test.
  if timedOut.take() == true {
    Issue.record(notFinished(within: limit), sourceLocation: sourceLocation)
  }
  return value
}

/// What a test records when work did not finish within `limit` (before scaling).
func notFinished(within limit: Duration) -> Comment {
  "did not finish within \(limit.scaled)\(TimeScale.factor == 1 ? "" : " (\(limit) scaled)")"
}

extension Result where Failure == any Error {
  init(catching body: () async throws -> Success) async {
    do {
      self = .success(try await body())
    } catch {
      self = .failure(error)
    }
  }
}

/// Holds one value until the first `take()`.
final class Slot<Value: Sendable>: Sendable {
  private let value = Locked<Value?>(nil)

  func put(_ newValue: Value) { value.withLock { $0 = newValue } }
  func take() -> Value? { value.withLock { $0.take() } }
}
