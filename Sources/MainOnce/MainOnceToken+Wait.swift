public import Dispatch

extension MainOnceToken {
  /// Blocks until the token is done, without bringing an initializer: it never runs one.
  ///
  /// For a consumer that must not initialize, waiting for a producer that does, as Rust's
  /// `Once::wait`:
  ///
  /// ```swift
  /// func startAudio() {  // the producer, any thread
  ///   onceOnMain(token: AudioEngine.setupToken) { configureAudio() }
  /// }
  ///
  /// func mixInBackground() {  // a consumer, another thread
  ///   AudioEngine.setupToken.wait()  // returns once startAudio()'s initializer has run
  ///   log("audio is set up")
  /// }
  /// ```
  ///
  /// It returns once an initializer run for the token has returned normally; an initializer
  /// that throws does not end the wait. Everything that initializer wrote happens before this
  /// call returns.
  ///
  /// - **Token done:** returns at once: one acquiring load, inlined.
  /// - **Outside main context:** the thread parks until the token is done. It sends no hop.
  /// - **In main context**, where a hop to the main queue cannot run while the wait blocks it:
  ///   the wait runs the initializers that callers queued for the main queue itself, of any
  ///   token or lazy value, those queued already and those that arrive while it waits, until
  ///   this token is done. Work queued on the main queue by other means (a
  ///   `DispatchQueue.main.async` block, a `@MainActor` task) cannot run until the wait
  ///   returns: a call to ``onceOnMain(token:file:line:_:)`` there never ends it.
  ///
  /// - Warning: Nothing but a caller that brings an initializer ends the wait: if none ever
  ///   calls, it waits for ever, and MainOnce reports it as a stall once it has lasted the stall
  ///   timeout. Called from inside the token's own initializer, the wait stops the process with
  ///   a message: it could never end. A wait outside main context deadlocks if the initializer
  ///   that would end it waits for this thread; MainOnce stops that cycle when every wait in it
  ///   is one it performs (see *Deadlocks: what MainOnce proves and what it reports*). It is
  ///   unavailable in `async` code, where it would block a thread of the cooperative pool: use
  ///   `try await wait()` there, which suspends instead.
  ///
  /// - Parameters:
  ///   - file: The caller's file, for diagnostics; leave the default.
  ///   - line: The caller's line, for diagnostics; leave the default.
  @available(
    *, noasync, message: "blocks the thread until the token is done; use 'try await wait()'"
  )
  @inlinable
  public func wait(file: StaticString = #fileID, line: UInt = #line) {
    if _fastPath(_isDone) { return }
    _waitSlowPath(CallSite(file: file, line: line))
  }

  #if compiler(>=6.2)
    /// Suspends until the token is done, without bringing an initializer: it never runs one.
    ///
    /// ```swift
    /// func mixWhenReady() async throws {  // any task
    ///   try await AudioEngine.setupToken.wait()
    ///   log("audio is set up")
    /// }
    /// ```
    ///
    /// It returns once an initializer run for the token has returned normally; an initializer
    /// that throws does not end the wait. Everything that initializer wrote happens before this
    /// call returns. A done token returns at once, with one acquiring load, inlined, on the
    /// caller's actor (`nonisolated(nonsending)`), cancelled or not; otherwise the task
    /// suspends.
    ///
    /// It never blocks a thread, so it cannot deadlock on the main queue; on the main actor it
    /// suspends, and lets the main queue run the initializer it waits for. Nothing but a caller
    /// that brings an initializer ends the wait: if none calls, MainOnce reports it as a stall
    /// once it has lasted the stall timeout.
    ///
    /// - Parameters:
    ///   - file: The caller's file, for diagnostics; leave the default.
    ///   - line: The caller's line, for diagnostics; leave the default.
    /// - Throws: `CancellationError` if the task is cancelled before the token is done.
    @inlinable
    public nonisolated(nonsending) func wait(
      file: StaticString = #fileID, line: UInt = #line
    ) async throws(CancellationError) {
      if _fastPath(_isDone) { return }
      try await _awaitSlowPath(isolation: #isolation, CallSite(file: file, line: line))
    }
  #else
    /// Suspends until the token is done; the form for Swift before 6.2, which has no
    /// `nonisolated(nonsending)`: it runs on the caller's actor through `isolation`, as the
    /// form above does, with the same guarantees.
    ///
    /// - Parameters:
    ///   - isolation: The caller's actor; leave the default.
    ///   - file: The caller's file, for diagnostics; leave the default.
    ///   - line: The caller's line, for diagnostics; leave the default.
    /// - Throws: `CancellationError` if the task is cancelled before the token is done.
    @inlinable
    public func wait(
      isolation: isolated (any Actor)? = #isolation,
      file: StaticString = #fileID, line: UInt = #line
    ) async throws(CancellationError) {
      if _fastPath(_isDone) { return }
      try await _awaitSlowPath(isolation: isolation, CallSite(file: file, line: line))
    }
  #endif

  @usableFromInline
  @inline(never)
  func _waitSlowPath(_ site: CallSite) {
    MainQueueEngine.wait(for: cell, site: site)
  }

  @usableFromInline
  @inline(never)
  func _awaitSlowPath(
    isolation: isolated (any Actor)?, _ site: CallSite
  ) async throws(CancellationError) {
    // The token stays borrowed until this returns, also while suspended.
    try await MainQueueEngine.suspend(waitingFor: cell, site: site)
  }
}

extension MainOnceToken {
  /// Returns at once; `completion` runs on `completionQueue` once the token is done. Brings no
  /// initializer: it never runs one.
  ///
  /// ```swift
  /// AudioEngine.setupToken.wait {
  ///   log("audio is set up")  // on the main queue, once an initializer has run
  /// }
  /// ```
  ///
  /// For callback-style code that must neither block nor initialize. `completion` is called
  /// once, asynchronously, also when the token is done already; it runs once an initializer run
  /// for the token has returned normally (one that throws does not end the wait), after the
  /// completions of the initializing calls queued before this one. Everything that initializer
  /// wrote happens before `completion` runs. As with the completion form of
  /// ``onceOnMain(token:completionQueue:file:line:_:completion:)-60dt3``, the token only has to
  /// live for the length of this call; but a token freed before it is done never will be:
  /// then, once no initializer queued before it is left to run, `completion` is released
  /// without being called, at the next look of MainOnce's stall timer (every 100 ms).
  ///
  /// It never blocks a thread, so it cannot deadlock. If no caller ever brings an initializer,
  /// `completion` never runs, and MainOnce reports the wait as a stall once it has lasted the
  /// stall timeout.
  ///
  /// - Parameters:
  ///   - completionQueue: Where `completion` runs. Defaults to the main queue.
  ///   - file: The caller's file, for diagnostics; leave the default.
  ///   - line: The caller's line, for diagnostics; leave the default.
  ///   - completion: Called once the token is done.
  public func wait(
    completionQueue: DispatchQueue = .main,
    file: StaticString = #fileID,
    line: UInt = #line,
    completion: @escaping @Sendable () -> Void
  ) {
    if _isDone { return completionQueue.async(execute: completion) }
    let waiter = Waiter(
      waitingAt: CallSite(file: file, line: line), label: cell.label,
      kind: .handler { resolution in
        guard case .done = resolution else {
          Diagnostics.internalInconsistency("a completion-form wait was told an attempt failed")
        }
        completionQueue.async(execute: completion)
      }, servesMainQueue: false, storage: nil)
    if !MainQueueEngine.enqueue(waiter, for: cell) {
      completionQueue.async(execute: completion)
    }
  }
}
