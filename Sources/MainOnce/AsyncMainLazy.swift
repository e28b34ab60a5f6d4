internal import Synchronization

/// A value built once on the main actor by an `async`, throwing builder, the first time it is
/// awaited.
///
/// ```swift
/// enum Sessions {
///   static let current = AsyncMainLazy { try await Session.restore() }
/// }
///
/// func resume() async throws {  // any task
///   let session = try await Sessions.current.get()
///   session.start()
/// }
/// ```
///
/// - Concurrent callers join one build in flight; the builder runs on the main actor, in a task
///   of its own, so that cancelling a caller never cancels the build.
/// - If the build throws, every caller waiting for it gets the error and nothing is kept: the
///   next access starts a new build.
/// - Once built, ``get(file:line:)`` is one acquiring load and one load: no lock, no hop, no
///   suspension.
///
/// A caller whose task is cancelled while it waits stops waiting with `CancellationError`; the
/// build goes on for the others. A build that succeeds is kept even if every caller waiting
/// for it was cancelled: the next access returns its value without building again.
///
/// ``isBuilt`` and ``valueIfBuilt`` ask without building or waiting: one acquiring load.
///
/// The builder is released once a build succeeds, with everything it captured; it is kept
/// while the value is unbuilt, since a failed build is retried.
///
/// Unlike ``MainLazy``, this is a class (its build outlives any one caller), so a `static let`
/// of it costs a lazy-global check on access.
///
/// This type cannot deadlock on the main queue: it never blocks a thread. A builder that awaits
/// its own value could never finish. MainOnce stops the process with a message that names the
/// declaration and the await when the build's own task awaits it, or a task the build must wait
/// for: a child task of the build (`async let`, a task group). A `Task { }` started inside the
/// build may or may not be waited for by the build, so MainOnce cannot tell whether its await
/// can end: such a task waits, and the stall report names its await's call site if the build
/// does not end. So does a child task that gave itself an executor preference of its own
/// (`group.addTask(executorPreference:)`, `withTaskExecutorPreference`): MainOnce recognises
/// children by the task executor each build owns, which they no longer run on, and the
/// runtime offers no public way to ask a task for its parent.
public final class AsyncMainLazy<Value: Sendable>: Sendable {
  /// Odd until built, then the address of the built value. Written only by a build, under
  /// `state`'s lock; the build's task holds `self`, so the storage is in place.
  @usableFromInline
  let _storage = _OnceWord()

  /// The build in flight, if any: reachable only with ``AsyncBuild``'s lock's proof.
  let current = AsyncBuild.Slot()
  /// The builder until a build succeeds: reachable only with ``AsyncBuild``'s lock's proof.
  private let builder: Builder
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
    builder = Builder(build)
    declaration = CallSite(file: file, line: line)
  }

  /// Holds the builder until a build succeeds, then `nil` (see ``finish(_:built:)``).
  private final class Builder: @unchecked Sendable {
    // This is safe because its one field, `build`, is reachable only with the lock's proof (a
    // `Guarded`), and the closure it holds is `Sendable`.
    private var build:
      Guarded<(@MainActor @Sendable () async throws -> Value)?, AsyncBuild.LockHeld>

    init(_ build: @escaping @MainActor @Sendable () async throws -> Value) {
      self.build = Guarded(build)
    }

    /// Reads or changes the builder, holding the lock.
    func withBuild<Result>(
      holding held: borrowing AsyncBuild.LockHeld,
      _ body: (inout (@MainActor @Sendable () async throws -> Value)?) -> Result
    ) -> Result {
      build.modify(held, body)
    }
  }

  deinit {
    // A build holds `self` until it ends, and publishes its value, so none is running and any
    // value built is published.
    if _storage.isPublished {
      let built = UnsafeMutablePointer<Value>(bitPattern: _storage.value).unsafelyUnwrapped
      built.deinitialize(count: 1)
      UnsafeMutableRawPointer(built).deallocate()
    }
  }

  /// The value, built on first use.
  ///
  /// Once built, this is one acquiring load and one load, inlined into the caller: no lock, no
  /// hop, no suspension. Everything the builder wrote happens before every return. Otherwise
  /// the caller joins the build in flight, or starts one on the main actor, and suspends; it
  /// never blocks a thread.
  ///
  /// - Parameters:
  ///   - file: The caller's file, for diagnostics; leave the default.
  ///   - line: The caller's line, for diagnostics; leave the default.
  /// - Returns: The value the build returned.
  /// - Throws: The error the build threw, if the build this caller waited for failed;
  ///   `CancellationError` if the caller's task was cancelled while it waited.
  @inlinable
  public func get(file: StaticString = #fileID, line: UInt = #line) async throws -> Value {
    let word = _storage.value
    if _fastPath(word & 1 == 0) {
      return UnsafePointer<Value>(bitPattern: word).unsafelyUnwrapped.pointee
    }
    return try await _buildOrJoin(CallSite(file: file, line: line))
  }

  /// Whether the value is built. Never builds it, and never waits for a build in flight.
  ///
  /// Once `true`, it stays `true`, and everything the builder wrote happens before the read
  /// that returned it. It is `false` while a build is in flight, and after a build that threw.
  /// One acquiring load, inlined into the caller; it cannot deadlock.
  @inlinable
  public var isBuilt: Bool {
    _storage.isPublished
  }

  /// The value if it is built, otherwise `nil`. Never builds it, never waits, never suspends:
  /// usable in synchronous code.
  ///
  /// Use it where a read must not start a build: a shutdown path, a metrics read.
  /// `if let session = Sessions.current.valueIfBuilt { session.save() }`.
  ///
  /// Everything the builder wrote happens before a read that returns the value. One acquiring
  /// load, and one load when built, inlined into the caller; it cannot deadlock.
  @inlinable
  public var valueIfBuilt: Value? {
    let word = _storage.value
    guard word & 1 == 0 else { return nil }
    return UnsafePointer<Value>(bitPattern: word).unsafelyUnwrapped.pointee
  }

  private var label: CellLabel {
    .asyncLazy(valueType: TypeName(Value.self), declaration: declaration)
  }

  /// Suspends until the value is built, and returns it, without building it: it never runs the
  /// builder.
  ///
  /// For a task that must not start the build, waiting for one that does:
  ///
  /// ```swift
  /// func resumeWhenRestored() async throws {  // any task; never restores the session itself
  ///   let session = try await Sessions.current.wait()
  ///   session.start()
  /// }
  /// ```
  ///
  /// It returns once a build has returned a value; a build that throws does not end the wait.
  /// Everything the builder wrote happens before this call returns. Once built, it returns at
  /// once, with one acquiring load and one load, inlined, cancelled or not. It never blocks a
  /// thread. Awaited from inside the value's own build (its task, or a child task the build
  /// waits for), it stops the process with a message, as ``get(file:line:)`` does there; if
  /// no caller ever builds the value, MainOnce reports the wait as a stall once it has lasted
  /// the stall timeout.
  ///
  /// - Parameters:
  ///   - file: The caller's file, for diagnostics; leave the default.
  ///   - line: The caller's line, for diagnostics; leave the default.
  /// - Returns: The value a build returned.
  /// - Throws: `CancellationError` if the task is cancelled before the value is built.
  @inlinable
  public func wait(
    file: StaticString = #fileID, line: UInt = #line
  ) async throws(CancellationError) -> Value {
    let word = _storage.value
    if _fastPath(word & 1 == 0) {
      return UnsafePointer<Value>(bitPattern: word).unsafelyUnwrapped.pointee
    }
    return try await _waitSlowPath(CallSite(file: file, line: line))
  }

  @usableFromInline
  @inline(never)
  func _buildOrJoin(_ site: CallSite) async throws -> Value {
    try await join(at: site, bringsBuild: true)
  }

  @usableFromInline
  @inline(never)
  func _waitSlowPath(_ site: CallSite) async throws(CancellationError) -> Value {
    do {
      return try await join(at: site, bringsBuild: false)
    } catch is CancellationError {
      throw CancellationError()
    } catch {
      Diagnostics.internalInconsistency("a wait for an AsyncMainLazy was told a build failed")
    }
  }

  /// Joins the build in flight, starting one if `bringsBuild` and none is; a wait that never
  /// builds joins a build that has not started yet (a subject for its stall report), which the
  /// first caller that builds starts.
  private func join(at site: CallSite, bringsBuild: Bool) async throws -> Value {
    _ = detectorIsInstalled
    let caller = AsyncBuild.Caller(
      insideBuild: AsyncBuild.Marker.current?.build, site: site, bringsBuild: bringsBuild)
    let outcome = await withTaskCancellationHandler {
      await withUnsafeContinuation { continuation in
        var shell = Shell(lazy: self)
        let (now, effects, times) = AsyncBuild.withLock {
          held -> (AsyncBuild.Outcome?, AsyncBuildEffects<AsyncBuild.CallerQueue>, Bool) in
          if _storage.isPublished { return (.built, AsyncBuildEffects(), false) }
          let isCancelled = caller.suspend(with: continuation, holding: held)
          let (arrival, effects, build) = current.withState(holding: held) { slot in
            let (arrival, effects) = slot.machine.arrive(
              caller, isCancelled: isCancelled, bringsBuild: bringsBuild)
            // A caller cancelled before it arrived is answered by the effects, and never joins.
            guard case .joins = arrival else { return (arrival, effects, AsyncBuild?.none) }
            let build = slot.build ?? AsyncBuild(label: label, slot: current)
            slot.build = build
            return (arrival, effects, build)
          }
          guard case .joins = arrival, let build else { return (nil, effects, false) }
          shell.build = build
          if caller.awaitsItsOwnBuild(build, holding: held) {
            Diagnostics.reentrance(
              label, firstCall: declaration, secondCall: caller.site, waits: !bringsBuild)
          }
          effects.performUnderLock(in: &shell, holding: held)
          let times = build.withState(holding: held) { state in
            defer { state.isTimed = true }
            return !state.isTimed
          }
          return (nil, effects, times)
        }
        if let now { return continuation.resume(returning: now) }
        effects.performAfterLock(in: &shell)
        if times { shell.build!.startStallTimer() }
      }
    } onCancel: {
      var shell = Shell(lazy: self)
      let (build, effects) = AsyncBuild.withLock {
        held -> (AsyncBuild?, AsyncBuildEffects<AsyncBuild.CallerQueue>?) in
        let cancelled = current.withState(holding: held) { slot in
          slot.build.flatMap { build in
            slot.machine.cancel(where: { $0 === caller }).map { (build, $0, slot.machine) }
          }
        }
        guard let (build, effects, machine) = cancelled else {
          caller.noteCancelled(holding: held)
          return (nil, nil)
        }
        // Nobody is left to watch for: the next caller starts a timer again.
        if machine.callers.isEmpty {
          build.withState(holding: held) { $0.isTimed = false }
          // A build nobody started, made for waits that never build, is over when they leave.
          if !machine.isBuilding {
            current.withState(holding: held) { $0.build = nil }
            build.withState(holding: held) { $0.isOver = true }
          }
        }
        effects.performUnderLock(in: &shell, holding: held)
        return (build, effects)
      }
      guard let build else { return }
      build.reportEndIfReported(finished: false)
      effects?.performAfterLock(in: &shell)
    }
    switch outcome {
    case .built: return UnsafePointer<Value>(bitPattern: _storage.value).unsafelyUnwrapped.pointee
    case .failed(let error): throw error
    case .cancelled: throw CancellationError()
    }
  }

  /// Starts `build`'s task: marked so that an await of this value from inside it is recognized,
  /// and with the build's own executor as its task executor preference, which its child tasks
  /// inherit and a `Task { }` does not (see ``AsyncBuild/Caller``). The builder itself runs on the
  /// main actor.
  private func start(_ build: AsyncBuild) {
    Task(executorPreference: build.executor) { [self] in
      build.noteBuildTask()
      let built = await AsyncBuild.Marker.$current.withValue(build.marker) {
        await buildValue(build)
      }
      finish(build, built: built)
    }
  }

  /// Runs the builder on the main actor; the built value's address (even: a done word), or the
  /// error.
  private func buildValue(_ build: AsyncBuild) async -> Result<UInt, any Error> {
    do {
      let value = try await runBuilder(build)
      let built = UnsafeMutableRawPointer.allocate(
        byteCount: MemoryLayout<Value>.size, alignment: max(2, MemoryLayout<Value>.alignment))
      built.initializeMemory(as: Value.self, to: value)
      return .success(UInt(bitPattern: built))
    } catch {
      return .failure(error)
    }
  }

  /// Runs the builder, once the build has reached the main actor.
  @MainActor
  private func runBuilder(_ build: AsyncBuild) async throws -> Value {
    let builder = AsyncBuild.withLock { held in
      build.withState(holding: held) { state in
        state.hasStarted = true
        state.startedAt = Platform.monotonicNanoseconds()
      }
      return self.builder.withBuild(holding: held) { $0 }
    }
    // A build starts only while the value is not published, and `finish` releases the builder
    // when it publishes, under the same lock.
    guard let builder else {
      Diagnostics.internalInconsistency("an AsyncMainLazy started a build after it was built")
    }
    return try await builder()
  }

  /// Publishes the value, also when every caller has been cancelled, and answers the callers.
  /// A success releases the builder, and what it captured; after a failure it is kept for the
  /// next build.
  private func finish(_ build: AsyncBuild, built: Result<UInt, any Error>) {
    var shell = Shell(lazy: self)
    var next: AsyncBuild?
    let effects = AsyncBuild.withLock { held in
      var (effects, waitsLeft) = current.withState(holding: held) { slot in
        let effects = slot.machine.buildEnded(with: try? built.get()) { $0.bringsBuild }
        slot.build = nil
        return (effects, !slot.machine.callers.isEmpty)
      }
      if case .failure(let error) = built { effects.failure = error }
      effects.performUnderLock(in: &shell, holding: held)
      build.withState(holding: held) { state in
        state.isOver = true
        state.task = nil
      }
      // Waits that never build outlive a build that threw: they wait for the next one, in a
      // build nobody has started yet, which takes over a stall reported about them (its end is
      // reported when they stop waiting, not now).
      if waitsLeft {
        let waiting = AsyncBuild(label: label, slot: current)
        let reportedSince = build.withState(holding: held) { state in
          defer { state.reportedSince = nil }
          return state.reportedSince
        }
        waiting.withState(holding: held) { state in
          state.isTimed = true
          state.reportedSince = reportedSince
        }
        current.withState(holding: held) { $0.build = waiting }
        next = waiting
      }
      return effects
    }
    build.reportEndIfReported(finished: true)
    next?.startStallTimer()
    effects.performAfterLock(in: &shell)
  }

  /// The lazy value, where its builds' effects are performed (see `AsyncBuildMachine.swift`).
  private struct Shell: AsyncBuildShell {
    typealias Callers = AsyncBuild.CallerQueue

    let lazy: AsyncMainLazy
    /// The build the caller joined, which the effects may start.
    var build: AsyncBuild?
    /// The builder a success took out, let go of after the lock.
    var released: (@MainActor @Sendable () async throws -> Value)?

    init(lazy: AsyncMainLazy) { self.lazy = lazy }

    mutating func publish(_ value: UInt, holding held: borrowing AsyncBuild.LockHeld) {
      lazy._storage.word.store(value, ordering: .releasing)
      released = lazy.builder.withBuild(holding: held) { build in
        defer { build = nil }
        return build
      }
    }

    // Released here, after the lock: a captured object's deinit may do anything.
    mutating func letGoOfBuilder() { released = nil }

    mutating func startBuild() { lazy.start(build!) }

    mutating func resume(
      _ caller: AsyncBuild.Caller, with verdict: Verdict, failure: (any Error)?
    ) {
      let outcome: AsyncBuild.Outcome =
        switch verdict {
        case .done: .built
        case .failed: .failed(failure!)
        case .cancelled: .cancelled
        }
      caller.resumeAnswered(with: outcome)
    }
  }
}
