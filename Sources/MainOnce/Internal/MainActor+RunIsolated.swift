extension MainActor {
  /// Runs main-actor code from a synchronous context that MainOnce has proven to hold the main
  /// queue, keeping the closure's typed error.
  static func runIsolated<Result: Sendable, Failure: Error>(
    _ body: @MainActor () throws(Failure) -> Result
  ) throws(Failure) -> Result {
    let outcome = MainActor.assumeIsolated { () -> Swift.Result<Result, Failure> in
      Swift.Result { () throws(Failure) in try body() }
    }
    return try outcome.get()
  }
}
