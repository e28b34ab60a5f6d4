internal import Dispatch
public import Synchronization

/// A value built once on the main actor by an `async`, throwing builder, the first time it is
/// awaited.
///
/// ```swift
/// enum Services {
///   static let session = AsyncMainLazy { try await Session.restore() }
/// }
///
/// let session = try await Services.session.value  // any task
/// ```
///
/// - Concurrent callers join one build in flight; the builder runs on the main actor, in a task
///   of its own, so that cancelling a caller never cancels the build.
/// - If the build throws, every caller waiting for it gets the error and nothing is kept: the
///   next access starts a new build.
/// - Once built, ``value`` is one acquiring load and one load: no lock, no hop, no suspension.
///
/// A caller whose task is cancelled while it waits stops waiting with `CancellationError`; the
/// build goes on for the others.
///
/// Unlike ``MainLazy``, this is a class (its build outlives any one caller), so a `static let`
/// of it costs a lazy-global check on access.
///
/// This type cannot deadlock on the main queue: it never blocks a thread.
public final class AsyncMainLazy<Value: Sendable>: Sendable {
  /// Zero until built, then the address of the built value.
  @usableFromInline
  let _state = Atomic<UInt>(0)

  private let build: @MainActor @Sendable () async throws -> Value
  private let building = Locked(BuildState())

  private struct BuildState {
    var isBuilding = false
    var nextWaiter = 0
    var waiters: [Int: UnsafeContinuation<Value, any Error>] = [:]
    /// Waiters cancelled before they were registered.
    var cancelledEarly: Set<Int> = []
  }

  /// Creates a lazily built value.
  ///
  /// - Parameter build: Builds the value on the main actor. It runs once per successful build;
  ///   after a failure, the next access runs it again.
  public init(_ build: @escaping @MainActor @Sendable () async throws -> Value) {
    self.build = build
  }

  deinit {
    if let built = UnsafeMutablePointer<Value>(bitPattern: _state.load(ordering: .acquiring)) {
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
      let address = _state.load(ordering: .acquiring)
      if _fastPath(address != 0) {
        return UnsafePointer<Value>(bitPattern: address).unsafelyUnwrapped.pointee
      }
      return try await _buildOrJoin()
    }
  }

  @usableFromInline
  @inline(never)
  func _buildOrJoin() async throws -> Value {
    let id = building.withLock { state in
      defer { state.nextWaiter += 1 }
      return state.nextWaiter
    }
    return try await withTaskCancellationHandler {
      try await withUnsafeThrowingContinuation { continuation in
        join(id, continuation)
      }
    } onCancel: {
      let waiter = building.withLock { state in
        guard let waiter = state.waiters.removeValue(forKey: id) else {
          state.cancelledEarly.insert(id)
          return UnsafeContinuation<Value, any Error>?.none
        }
        return waiter
      }
      waiter?.resume(throwing: CancellationError())
    }
  }

  private enum JoinStep {
    case resume(Value)
    case cancel
    case wait
    case start
  }

  private func join(_ id: Int, _ continuation: UnsafeContinuation<Value, any Error>) {
    let step = building.withLock { state -> JoinStep in
      if state.cancelledEarly.remove(id) != nil { return .cancel }
      let address = _state.load(ordering: .acquiring)
      if address != 0 { return .resume(UnsafePointer<Value>(bitPattern: address)!.pointee) }
      state.waiters[id] = continuation
      if state.isBuilding { return .wait }
      state.isBuilding = true
      return .start
    }
    switch step {
    case .resume(let value): continuation.resume(returning: value)
    case .cancel: continuation.resume(throwing: CancellationError())
    case .wait: break
    case .start: Task { @MainActor in self.finish(await self.runBuild()) }
    }
  }

  @MainActor
  private func runBuild() async -> Result<Value, any Error> {
    do {
      return .success(try await build())
    } catch {
      return .failure(error)
    }
  }

  /// Publishes a built value and resumes every waiter, or hands every waiter the error.
  private func finish(_ result: Result<Value, any Error>) {
    let waiters = building.withLock { state in
      if case .success(let value) = result {
        let built = UnsafeMutablePointer<Value>.allocate(capacity: 1)
        built.initialize(to: value)
        _state.store(UInt(bitPattern: built), ordering: .releasing)
      }
      state.isBuilding = false
      defer { state.waiters.removeAll() }
      return state.waiters.values
    }
    for waiter in waiters { waiter.resume(with: result) }
  }
}
