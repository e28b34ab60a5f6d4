extension MainActor {
  /// Runs main-actor code from a synchronous context that MainOnce has proven to hold the main
  /// queue, keeping the closure's typed error.
  ///
  /// This is `MainActor.assumeIsolated(_:)` without its check and without its allocation. The
  /// check asks the concurrency runtime, which on Linux ends in `dispatch_assert_queue` on the
  /// main queue: the same question ``MainContext`` has answered from the same word before
  /// MainOnce gets here, and it costs most of a first call after `dispatchMain()`.
  /// The allocation is `withoutActuallyEscaping`'s, which `assumeIsolated` uses to cast the
  /// closure's isolation away: an escaping context on the heap for every call (one per first
  /// call, counted with callgrind). Debug builds keep a check.
  @inline(__always)
  static func runIsolated<Result, Failure: Error>(
    _ body: @MainActor () throws(Failure) -> Result
  ) throws(Failure) -> Result {
    assert(MainContext.isCurrent, "MainOnce ran main-actor code outside main context")
    return try callMainActorBody(body)
  }
}

/// Calls `body` on the main actor: the one function that ``callMainActorBody(_:)`` names
/// without its isolation.
@MainActor
@_silgen_name("mainonce_call_main_actor_body")
private func callMainActorBodyIsolated<Result, Failure: Error>(
  _ body: @MainActor () throws(Failure) -> Result
) throws(Failure) -> Result {
  try body()
}

/// ``callMainActorBodyIsolated(_:)``, declared without its isolation, so that code that holds
/// the main queue calls it from a synchronous nonisolated context.
///
/// This is safe because the two declarations name one function, whose calling convention the
/// isolation does not change (global-actor isolation is not part of the lowered function type,
/// and neither declaration has an isolated parameter), and ``MainActor/runIsolated(_:)``, the
/// only caller, runs only where MainOnce has proven that the caller holds the main queue: the
/// main actor's executor on Linux. Built with `-enable-actor-data-race-checks` (off by default;
/// MainOnce does not pass it), the isolated body would check its executor first: that check
/// would pass, at the cost this function exists to avoid.
@_silgen_name("mainonce_call_main_actor_body")
private func callMainActorBody<Result, Failure: Error>(
  _ body: @MainActor () throws(Failure) -> Result
) throws(Failure) -> Result
