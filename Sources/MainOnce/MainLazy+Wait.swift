extension MainLazy where Value: Sendable {
  /// Blocks until the value is built, and returns it, without building it: it never runs the
  /// builder.
  ///
  /// For a reader that must not start the build, waiting for one that does:
  ///
  /// ```swift
  /// func recordWhenOpen() {  // any thread; never opens the database itself
  ///   let database = Stores.database.wait()  // returns once a read has built it
  ///   database.record("opened")
  /// }
  /// ```
  ///
  /// It returns once a build has returned a value; a build that throws does not end the wait.
  /// Everything the builder wrote happens before this call returns.
  ///
  /// - **Built:** returns at once: one acquiring load and one load, inlined.
  /// - **Outside main context:** the thread parks until the value is built. It sends no hop.
  /// - **In main context**, where a hop to the main queue cannot run while the wait blocks it:
  ///   the wait runs the builds and initializers that callers queued for the main queue itself,
  ///   those queued already and those that arrive while it waits, until the value is built.
  ///   Work queued on the main queue by other means (a `DispatchQueue.main.async` block, a
  ///   `@MainActor` task) cannot run until the wait returns: a read there never ends it.
  ///
  /// - Warning: Nothing but a read that builds ends the wait: if none ever comes, it waits for
  ///   ever, and MainOnce reports it as a stall once it has lasted the stall timeout. Called from
  ///   inside the value's own builder, it stops the process with a message. A wait outside main
  ///   context deadlocks if the build that would end it waits for this thread; MainOnce stops
  ///   that cycle when every wait in it is one it performs. It is unavailable in `async` code,
  ///   where it would block a thread of the cooperative pool: use `try await wait()` there.
  ///
  /// - Parameters:
  ///   - file: The caller's file, for diagnostics; leave the default.
  ///   - line: The caller's line, for diagnostics; leave the default.
  /// - Returns: The value a build returned.
  @available(
    *, noasync, message: "blocks the thread until the value is built; use 'try await wait()'"
  )
  @inlinable
  public func wait(file: StaticString = #fileID, line: UInt = #line) -> Value {
    let word = _storage.value
    if _fastPath(word & 1 == 0) {
      return UnsafePointer<Value>(bitPattern: word).unsafelyUnwrapped.pointee
    }
    return _waitSlowPath(CallSite(file: file, line: line)).pointee
  }

  #if compiler(>=6.2)
    /// Suspends until the value is built, and returns it, without building it: it never runs the
    /// builder.
    ///
    /// It returns once a build has returned a value; a build that throws does not end the wait.
    /// Everything the builder wrote happens before this call returns. Once built, it returns at
    /// once, with one acquiring load and one load, inlined, on the caller's actor
    /// (`nonisolated(nonsending)`), cancelled or not; otherwise the task suspends, on the main
    /// actor too, which lets the main queue run the build it waits for. It never blocks a thread,
    /// so it cannot deadlock on the main queue; if no read ever builds the value, MainOnce
    /// reports the wait as a stall once it has lasted the stall timeout.
    ///
    /// - Parameters:
    ///   - file: The caller's file, for diagnostics; leave the default.
    ///   - line: The caller's line, for diagnostics; leave the default.
    /// - Returns: The value a build returned.
    /// - Throws: `CancellationError` if the task is cancelled before the value is built.
    @inlinable
    public nonisolated(nonsending) func wait(
      file: StaticString = #fileID, line: UInt = #line
    ) async throws(CancellationError) -> Value {
      let word = _storage.value
      if _fastPath(word & 1 == 0) {
        return UnsafePointer<Value>(bitPattern: word).unsafelyUnwrapped.pointee
      }
      return try await _awaitSlowPath(isolation: #isolation, CallSite(file: file, line: line))
        .pointee
    }
  #else
    /// Suspends until the value is built, and returns it, without building it; the form for
    /// Swift before 6.2, which has no `nonisolated(nonsending)`: it runs on the caller's actor
    /// through `isolation`, as the form above does, with the same guarantees.
    ///
    /// - Parameters:
    ///   - isolation: The caller's actor; leave the default.
    ///   - file: The caller's file, for diagnostics; leave the default.
    ///   - line: The caller's line, for diagnostics; leave the default.
    /// - Returns: The value a build returned.
    /// - Throws: `CancellationError` if the task is cancelled before the value is built.
    @inlinable
    public func wait(
      isolation: isolated (any Actor)? = #isolation,
      file: StaticString = #fileID, line: UInt = #line
    ) async throws(CancellationError) -> Value {
      let word = _storage.value
      if _fastPath(word & 1 == 0) {
        return UnsafePointer<Value>(bitPattern: word).unsafelyUnwrapped.pointee
      }
      return try await _awaitSlowPath(isolation: isolation, CallSite(file: file, line: line))
        .pointee
    }
  #endif

  @usableFromInline
  @inline(never)
  func _waitSlowPath(_ site: CallSite) -> UnsafePointer<Value> {
    MainQueueEngine.wait(for: cell, site: site)
    return UnsafePointer(bitPattern: _storage.value).unsafelyUnwrapped
  }

  @usableFromInline
  @inline(never)
  func _awaitSlowPath(
    isolation: isolated (any Actor)?, _ site: CallSite
  ) async throws(CancellationError) -> UnsafePointer<Value> {
    // The lazy value stays borrowed until this returns, also while suspended.
    try await MainQueueEngine.suspend(waitingFor: cell, site: site)
    return UnsafePointer(bitPattern: _storage.value).unsafelyUnwrapped
  }
}
