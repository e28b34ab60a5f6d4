extension MainActor {
  /// Runs main-actor code from a synchronous context that MainOnce has proven to hold the main
  /// queue, keeping the closure's typed error.
  ///
  /// This is `MainActor.assumeIsolated(_:)` without its check. That check asks the concurrency
  /// runtime, which on Linux ends in `dispatch_assert_queue` on the main queue: the same
  /// question ``MainContext`` has answered from the same word before MainOnce gets here, and it
  /// costs about 160 ns, most of a first call after `dispatchMain()`. Debug builds keep a check.
  static func runIsolated<Result, Failure: Error>(
    _ body: @MainActor () throws(Failure) -> Result
  ) throws(Failure) -> Result {
    assert(MainContext.isCurrent, "MainOnce ran main-actor code outside main context")
    return try withoutActuallyEscaping(body) { (body) throws(Failure) -> Result in
      // This is safe because the caller holds the main queue, which is the main actor's
      // executor on Linux, and the two function types differ only in isolation, not in layout.
      let nonisolatedBody = unsafeBitCast(body, to: (() throws(Failure) -> Result).self)
      return try nonisolatedBody()
    }
  }
}
