extension OnceEngine {
  /// Queues `attempt` for `cell` and suspends until the cell is done, the attempt has run, or
  /// the task is cancelled before the attempt started. Never blocks a thread.
  static func suspend(for cell: OnceCell, site: CallSite, attempt: @escaping Attempt) async
    -> Resolution
  {
    let registration = AsyncRegistration()
    return await withTaskCancellationHandler {
      await withUnsafeContinuation { continuation in
        let waiter = Waiter(
          site: site, attempt: attempt, resolvesInOrder: false,
          onResolution: { continuation.resume(returning: $0) })
        guard registration.register(waiter) else {
          return continuation.resume(returning: .cancelled)
        }
        if !enqueue(waiter, for: cell) { continuation.resume(returning: .done) }
      }
    } onCancel: {
      // A waiter whose initializer has started is not withdrawn: it gets that run's result.
      if let waiter = registration.cancel(), withdraw(waiter, from: cell) {
        waiter.resolve(.cancelled)
      }
    }
  }
}

/// Hands a waiter from the suspending task to its cancellation handler, whichever runs first.
private final class AsyncRegistration: Sendable {
  private enum State {
    case empty
    case registered(Waiter)
    case cancelled
  }

  private let state = Locked(State.empty)

  /// Records the waiter; returns `false` if the task was cancelled first.
  func register(_ waiter: Waiter) -> Bool {
    state.withLock { state in
      guard case .empty = state else { return false }
      state = .registered(waiter)
      return true
    }
  }

  /// Marks the task cancelled; returns the waiter if one was registered.
  func cancel() -> Waiter? {
    state.withLock { state in
      defer { state = .cancelled }
      guard case .registered(let waiter) = state else { return nil }
      return waiter
    }
  }
}
