internal import Dispatch

/// A value built once on the main actor by an `async`, throwing builder, the first time it is
/// awaited.
///
/// ```swift
/// enum Sessions {
///   static let current = AsyncMainLazy { try await Session.restore() }
/// }
///
/// func resume() async throws {  // any task
///   let session = try await Sessions.current.value
///   session.start()
/// }
/// ```
///
/// - Concurrent callers join one build in flight; the builder runs on the main actor, in a task
///   of its own, so that cancelling a caller never cancels the build.
/// - If the build throws, every caller waiting for it gets the error and nothing is kept: the
///   next access starts a new build.
/// - Once built, ``value`` is one acquiring load and one load: no lock, no hop, no suspension.
///
/// A caller whose task is cancelled while it waits stops waiting with `CancellationError`; the
/// build goes on for the others. A build that succeeds is kept even if every caller waiting
/// for it was cancelled: the next access returns its value without building again.
///
/// Unlike ``MainLazy``, this is a class (its build outlives any one caller), so a `static let`
/// of it costs a lazy-global check on access.
///
/// This type cannot deadlock on the main queue: it never blocks a thread. A builder that
/// awaits its own ``value`` could never finish; MainOnce stops the process with a message that
/// names the declaration instead.
public final class AsyncMainLazy<Value: Sendable>: Sendable {
  /// Zero until built, then the address of the built value. Written only by MainOnce.
  @usableFromInline
  let _storage = _OnceStorage()

  private let build: @MainActor @Sendable () async throws -> Value
  private let declaration: CallSite

  /// Creates a lazily built value.
  ///
  /// - Parameters:
  ///   - file: The file that declares the value, for diagnostics; leave the default.
  ///   - line: The line that declares the value, for diagnostics; leave the default.
  ///   - build: Builds the value on the main actor. It runs once per successful build; after a
  ///     failure, the next access runs it again.
  public init(
    file: StaticString = #fileID,
    line: UInt = #line,
    _ build: @escaping @MainActor @Sendable () async throws -> Value
  ) {
    self.build = build
    declaration = CallSite(file: file, line: line)
  }

  deinit {
    // A build holds `self` until it ends, and publishes its value, so none is running and any
    // value built is published.
    if let built = UnsafeMutablePointer<Value>(bitPattern: _storage.published) {
      built.deinitialize(count: 1)
      built.deallocate()
    }
  }

  /// The value, built on first use.
  ///
  /// - Throws: The error the build threw, if the build this caller waited for failed;
  ///   `CancellationError` if the caller's task was cancelled while it waited.
  @inlinable
  public var value: Value {
    get async throws {
      let address = _storage.published
      if _fastPath(address != 0) {
        return UnsafePointer<Value>(bitPattern: address).unsafelyUnwrapped.pointee
      }
      return try await _buildOrJoin()
    }
  }

  private var label: CellLabel {
    .asyncLazy(typeName: String(describing: Value.self), declaration: declaration)
  }

  @usableFromInline
  @inline(never)
  func _buildOrJoin() async throws -> Value {
    // `self` is retained for the length of the call, and its storage with it.
    let cell = _storage.cell(label: label)
    let waiter = Waiter(site: declaration, attempt: nil, delivery: .task(nil))
    try await OnceEngine.suspend(
      waiter, for: cell, policy: .mainActorTask,
      start: { flight in Task { @MainActor in await self.runBuild(for: flight) } })
    return UnsafePointer<Value>(bitPattern: _storage.published).unsafelyUnwrapped.pointee
  }

  /// Runs the builder and hands its outcome to every caller waiting for it.
  @MainActor
  private func runBuild(for flight: Flight) async {
    // This is safe because the reference is kept in the runner only while this task builds
    // (`finishBuild` clears it, on this task), and it is only compared with callers' tasks.
    let task = withUnsafeCurrentTask { $0 }
    let thread = ThreadRecord.current.id
    Registry.shared.withLock { _ in
      flight.hopIsOnItsWay = false
      flight.runner = Runner(thread: thread, site: declaration, task: task)
    }
    let result: Result<UInt, any Error>
    do {
      let value = try await build()
      let built = UnsafeMutablePointer<Value>.allocate(capacity: 1)
      built.initialize(to: value)
      result = .success(UInt(bitPattern: built))
    } catch {
      result = .failure(error)
    }
    // This method borrows `self`, which the build's task holds: the storage is in place, and the
    // value is published here, also when every caller has been cancelled.
    let storage = _storage.address
    Registry.shared.withLock { registry in
      let deliveries = registry.finishBuild(flight, with: result)
      _ = Cell.publishIfFinished(storage)
      return deliveries
    }.deliver()
  }
}

extension Registry {
  /// Records the end of an `AsyncMainLazy` build: every waiting caller gets its outcome.
  mutating func finishBuild(_ flight: Flight, with result: Result<UInt, any Error>) -> Deliveries {
    var deliveries = Deliveries()
    flight.runner = nil
    switch result {
    case .success(let value):
      flight.outcome = value
      for waiter in flight.queue { deliveries.resolve(waiter, .done) }
    case .failure(let error):
      for waiter in flight.queue { deliveries.resolve(waiter, .failed(error)) }
    }
    flight.queue.removeAll()
    retireIfIdle(flight)
    deliveries.endOfStall = endOfStall(flight)
    return deliveries
  }
}
