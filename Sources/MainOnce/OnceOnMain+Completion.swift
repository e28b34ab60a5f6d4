public import Dispatch

/// Starts or joins the initialization for `token` and returns at once; `completion` runs on
/// `completionQueue` when it is done.
///
/// ```swift
/// onceOnMain(token: Fonts.setupToken) {
///   loadSystemFonts()
/// } completion: {
///   renderFirstFrame()  // on the main queue, after the initializer
/// }
/// ```
///
/// For callback-style code that must not block. This shares tokens with the blocking and async
/// forms: a second caller never causes a second run. `completion` is always called
/// asynchronously, on `completionQueue`, exactly once per call, also when the token is already
/// done or the call is made in main context. Completions of calls that arrive while the
/// initialization is in flight are kept and submitted in the order the calls arrived, when it
/// finishes; on a serial queue they run in that order, also relative to calls that arrive after
/// it finished.
///
/// Everything the initializer wrote happens before `completion` runs, and the token reads as
/// done there (``MainOnceToken/isDone``).
///
/// The token only has to live for the length of this call. MainOnce keeps no reference to it
/// afterwards: the object that holds the token may be released before `completion` runs, even by
/// `completion` itself, and the initialization still runs and `completion` is still called. (A
/// new object that happens to get the same address has a fresh token of its own.)
///
/// This form cannot deadlock on the main queue: it never blocks a thread. For the same reason,
/// unlike the blocking forms, it does not stop when called inside the token's own initializer:
/// the call queues, returns, and `completion` runs after that initializer has returned, after
/// the completion of the call that runs it.
///
/// - Parameters:
///   - token: The token that records whether an initializer has run.
///   - completionQueue: Where `completion` runs. Defaults to the main queue.
///   - file: The caller's file, for diagnostics; leave the default.
///   - line: The caller's line, for diagnostics; leave the default.
///   - initializer: The work to do once, in main context.
///   - completion: Called once the token is done.
public func onceOnMain(
  token: borrowing MainOnceToken,
  completionQueue: DispatchQueue = .main,
  file: StaticString = #fileID,
  line: UInt = #line,
  _ initializer: @escaping @MainActor @Sendable () -> Void,
  completion: @escaping @Sendable () -> Void
) {
  onceOnMain(
    token: token, completionQueue: completionQueue, file: file, line: line, initializer,
    completion: { (_: Result<Void, Never>) in completion() })
}

/// Starts or joins the initialization for `token` and returns at once; `completion` receives
/// the outcome on `completionQueue`.
///
/// Like the non-throwing form, except that `initializer` may throw. If this caller's initializer
/// ran and threw, `completion` receives that error, the token stays fresh, and the next waiting
/// caller's initializer is tried, as in ``onceOnMain(token:file:line:_:)``. Every other outcome
/// is `.success`. As with the non-throwing form, the token only has to live for the length of
/// this call.
///
/// - Parameters:
///   - token: The token that records whether an initializer has run.
///   - completionQueue: Where `completion` runs. Defaults to the main queue.
///   - file: The caller's file, for diagnostics; leave the default.
///   - line: The caller's line, for diagnostics; leave the default.
///   - initializer: The work to do once, in main context.
///   - completion: Called once with the outcome of this call.
public func onceOnMain<Failure: Error>(
  token: borrowing MainOnceToken,
  completionQueue: DispatchQueue = .main,
  file: StaticString = #fileID,
  line: UInt = #line,
  _ initializer: @escaping @MainActor @Sendable () throws(Failure) -> Void,
  completion: @escaping @Sendable (Result<Void, Failure>) -> Void
) {
  if token._isDone {
    return completionQueue.async { completion(.success(())) }
  }
  let waiter = Waiter(
    site: CallSite(file: file, line: line), label: token.cell.label,
    kind: .handler { resolution in
      let outcome: Result<Void, Failure> =
        switch resolution {
        case .failed(let error): .failure(error as! Failure)
        case .done: .success(())
        case .cancelled:
          Diagnostics.internalInconsistency("a completion-form caller was resolved as cancelled")
        }
      completionQueue.async { completion(outcome) }
    },
    attempt: {
      MainQueueEngine.erase { () throws(Failure) in try runTokenInitializer(initializer) }
    },
    storage: nil)
  if !MainQueueEngine.enqueue(waiter, for: token.cell) {
    completionQueue.async { completion(.success(())) }
  }
}
