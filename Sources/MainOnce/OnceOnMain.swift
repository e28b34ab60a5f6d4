/// Runs `initializer` exactly once per token, in main context, and returns after it has run.
///
/// ```swift
/// enum Fonts {
///   static let setupToken = MainOnceToken("fonts")
/// }
///
/// func drawText() {  // any thread
///   onceOnMain(token: Fonts.setupToken) {
///     loadSystemFonts()
///   }
///   // The fonts are loaded here, whichever thread got here first.
/// }
/// ```
///
/// The first caller for a fresh token runs `initializer`; every other caller waits until it
/// has returned. Where it runs depends on the caller:
///
/// - **Token done:** the call returns at once. This is one acquiring load and a predicted
///   branch, inlined into the caller: no lock, no allocation, no main-thread check.
/// - **In main context** (see ``MainContext``): `initializer` runs right here. A hop to the main
///   queue from main context would trap in libdispatch, so there is none.
/// - **Anywhere else:** the call queues `initializer`, hops to the main queue with one
///   `DispatchQueue.main.async` (concurrent callers share it) and sleeps until the token is
///   done or its own initializer has thrown. Whoever finishes the token releases every waiting
///   caller: the hop, or main-queue code that ran the token in place meanwhile.
///
/// To compute a value once rather than run setup code, use ``MainLazy``: it is this, with a
/// result.
///
/// ## Guarantees
///
/// - `initializer` runs in main context, so it may touch `@MainActor` state. Under
///   `RunLoop.main.run()`, with ``MainQueueDriver`` and before `dispatchMain()` that is the main
///   thread; after `dispatchMain()` it is whichever worker thread holds the main queue (call
///   ``MainContext/requireMainThread(for:file:line:)`` first in an initializer that needs the
///   main thread itself).
/// - At most one initializer for a token is running at any time, and once one returns normally
///   no other runs for that token again.
/// - No call returns before an initializer for the token has returned normally, or its own
///   initializer has thrown.
/// - Everything `initializer` wrote *happens before* every return from this function for the
///   same token, on every thread: the token is published with a releasing store and read with
///   an acquiring load.
///
/// ## Errors
///
/// If `initializer` throws, the token stays fresh and the error is thrown to the caller whose
/// initializer it was, like Rust's `OnceLock::get_or_try_init` and C++ `std::call_once`.
/// Callers that were waiting are not lost: their own initializers are tried next, in the order
/// they arrived, until one succeeds. Main-queue code whose initializer throws goes on with the
/// waiting callers' initializers before it returns the error: it holds the main queue, so no hop
/// could run them until it returns.
///
/// - Warning: This blocks the calling thread while the main queue runs `initializer`. It
///   deadlocks if the main queue is waiting for the calling thread: for example when main-queue
///   code waits on a semaphore that this thread would signal afterwards. MainOnce stops with a
///   report when it can prove the cycle (see `DispatchSemaphore.wait(for:)`), and reports a
///   wait it cannot see into once it has lasted the stall timeout. Calling the same token from
///   inside its own initializer stops the process with a message that names both call sites.
///
/// - Parameters:
///   - token: The token that records whether the initializer has run.
///   - file: The caller's file, for diagnostics; leave the default.
///   - line: The caller's line, for diagnostics; leave the default.
///   - initializer: The work to do once, in main context.
/// - Throws: The error `initializer` threw, if this caller's initializer ran and threw.
@inlinable
public func onceOnMain<Failure: Error>(
  token: borrowing MainOnceToken,
  file: StaticString = #fileID,
  line: UInt = #line,
  _ initializer: @MainActor () throws(Failure) -> Void
) throws(Failure) {
  if _fastPath(token._isDone) { return }
  try _onceOnMainSlowPath(token, CallSite(file: file, line: line), initializer)
}

/// The slow path of ``onceOnMain(token:file:line:_:)``: specialized in the caller's module for
/// its `Failure` (and not inlined there), it turns the initializer's typed error into the
/// `any Error` of ``_onceOnMainErasedSlowPath(_:_:_:)``, so that nothing after it is generic.
@inlinable
@inline(never)
func _onceOnMainSlowPath<Failure: Error>(
  _ token: borrowing MainOnceToken,
  _ site: CallSite,
  _ initializer: @MainActor () throws(Failure) -> Void
) throws(Failure) {
  let failure = _onceOnMainErasedSlowPath(token, site) { () -> (any Error)? in
    do { try initializer() } catch { return error }
    return nil
  }
  // The error came from this caller's own initializer, which throws `Failure`.
  if let failure { throw failure as! Failure }
}

/// Runs `initializer`, which returns the error it threw, once for `token`; returns that error
/// if this caller's initializer ran and threw.
@usableFromInline
func _onceOnMainErasedSlowPath(
  _ token: borrowing MainOnceToken,
  _ site: CallSite,
  _ initializer: @MainActor () -> (any Error)?
) -> (any Error)? {
  MainQueueEngine.run(token.cell, site: site) {
    MainActor.runIsolated(initializer).map(Result.failure) ?? .success(0)
  }
}

/// Runs a token's initializer in main context, as every form of ``onceOnMain(token:file:line:_:)``
/// hands it to the engine: it returns the word of a done token, 0.
func runTokenInitializer<Failure: Error>(
  _ initializer: @MainActor () throws(Failure) -> Void
) throws(Failure) -> UInt {
  try MainActor.runIsolated(initializer)
  return 0
}
