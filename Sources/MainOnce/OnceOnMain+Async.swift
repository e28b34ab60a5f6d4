/// Runs `initializer` exactly once per token, in main context, suspending instead of blocking.
///
/// ```swift
/// func loadView() async throws {
///   try await onceOnMain(token: Fonts.setupToken) {
///     loadSystemFonts()
///   }
/// }
/// ```
///
/// This shares tokens, and the exactly-once guarantee, with the blocking
/// ``onceOnMain(token:file:line:_:)``: sync callers, async callers and completion callers of a
/// token all queue behind one initialization.
///
/// - **Token done:** returns at once: one acquiring load, inlined.
/// - **Called from the main actor** (or other main-context code): `initializer` runs right here,
///   without a suspension.
/// - **Anywhere else:** the call queues `initializer`, sends one asynchronous hop to the main
///   queue (on Linux, the main actor's executor) if none is on its way, and suspends. No thread
///   is blocked.
///
/// Everything the initializer that ran wrote happens before this call returns.
///
/// If the task is cancelled while it waits, or before it calls, the call stops waiting and
/// throws `CancellationError`; that is why it is `try await` even for an initializer that
/// cannot throw. The initialization is not cancelled: an initializer that has started runs to
/// completion, and if it was this caller's, the call returns its result instead. Other callers
/// are not affected. A done token returns at once, cancelled or not.
///
/// The token stays borrowed until the call returns, also while it is suspended: MainOnce never
/// touches the token after that. A caller that stops waiting (cancelled) leaves nothing behind
/// that refers to it.
///
/// This form cannot deadlock on the main queue: it never blocks a thread. An initializer that
/// blocks waiting for an async caller can still hang, as any blocking code can.
///
/// - Parameters:
///   - token: The token that records whether an initializer has run.
///   - isolation: The caller's actor; leave the default. On the main actor the initializer runs
///     in place.
///   - file: The caller's file, for diagnostics; leave the default.
///   - line: The caller's line, for diagnostics; leave the default.
///   - initializer: The work to do once, in main context.
/// - Throws: `CancellationError` if the task was cancelled before this caller's initializer
///   started; the error `initializer` threw, if this caller's initializer ran and threw.
@inlinable
public func onceOnMain(
  token: borrowing MainOnceToken,
  isolation: isolated (any Actor)? = #isolation,
  file: StaticString = #fileID,
  line: UInt = #line,
  _ initializer: @escaping @MainActor @Sendable () throws -> Void
) async throws {
  if _fastPath(token._isDone) { return }
  try await _onceOnMainAsyncSlowPath(
    token, isolation: isolation, CallSite(file: file, line: line), initializer)
}

@usableFromInline
@inline(never)
func _onceOnMainAsyncSlowPath(
  _ token: borrowing MainOnceToken,
  isolation: isolated (any Actor)?,
  _ site: CallSite,
  _ initializer: @escaping @MainActor @Sendable () throws -> Void
) async throws {
  // The token stays borrowed until this returns, also while suspended; nothing that outlives
  // the call gets the cell.
  let cell = token.cell
  if MainContext.isCurrent {
    return try MainQueueEngine.run(cell, site: site, throwing: (any Error).self) {
      MainQueueEngine.erase { try runTokenInitializer(initializer) }
    }
  }
  try await MainQueueEngine.suspend(cell, site: site) {
    MainQueueEngine.erase { try runTokenInitializer(initializer) }
  }
}
