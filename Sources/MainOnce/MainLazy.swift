public import Synchronization
internal import _CMainOnceShims

#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Musl)
  internal import Musl
#elseif canImport(Darwin)
  internal import Darwin
#endif

/// A value built once, in main context, the first time it is read.
///
/// Use it for "lazy singleton stacks": objects that must be created on the main queue (they
/// talk to a main-thread-only library, or hold `@MainActor` state) but are read from anywhere.
/// It is also the answer to "`onceOnMain` that returns a value".
///
/// ```swift
/// enum Stores {
///   static let render = MainLazy { RenderStack() }
///   static let database = MainLazy { try Database(path: databasePath) }
/// }
///
/// func draw() throws {  // any thread
///   render(Stores.render.value)  // built on first use, in main context
///   let database = try Stores.database.value  // a builder that throws
///   database.record("frame drawn")
/// }
/// ```
///
/// The builder runs exactly as an initializer of ``onceOnMain(token:file:line:_:)`` does: once,
/// in main context, with concurrent readers waiting for it; everything it wrote happens before
/// every return of `value`. The value's address is published, after the builder returned, with
/// a releasing compare-and-exchange (or a releasing store under MainOnce's lock), and every read
/// loads it with an acquiring load: everything the builder wrote happens before every read that
/// sees the value. Once built, reading `value` is that acquiring load and one load through the
/// published address: no lock and no hop. A first read in main context that no other thread
/// joins builds in place, as a token's first call there runs its initializer: one
/// compare-and-exchange marks the value as being built, the builder runs, and another
/// publishes the value: no gate, no lock that anyone else takes (the builder's slot is a
/// `Mutex` that only builds take, one at a time) and one allocation, the value's. Like a
/// token, a `MainLazy` is statically initialized when declared as a `static let` with a closure
/// that captures nothing, and it cannot be declared with `var`.
///
/// A builder that throws (`Failure` is not `Never`) leaves the value unbuilt: the error is
/// thrown to the reader whose build it was, and the next read builds again. Readers that were
/// waiting run the builder in turn, as callers of a token do. With a builder that cannot throw,
/// reading `value` needs no `try`.
///
/// A `Value` that is `Sendable` can be read from any thread. One that is not is read on the
/// main actor: in the Swift 6 language mode, reading it elsewhere does not compile.
///
/// In `async` code, read a `Sendable` value with ``get()``, which suspends where `value` would
/// block: `value` is unavailable there (`@available(*, noasync)`), so a blocking read from a
/// thread of the cooperative pool does not compile. On the main actor `get()` never suspends
/// and builds in place, as `value` does. A value that is not `Sendable` is read with `value` on
/// the main actor, in synchronous and `async` code alike: that read never blocks.
///
/// ```swift
/// @MainActor
/// func saveOnQuit() async {
///   Services.stack.value.save()  // not Sendable: read on the main actor, never blocks
///   render(await Stores.render.get())  // Sendable: no suspension on the main actor
/// }
///
/// nonisolated func prefetch() async {
///   render(await Stores.render.get())  // suspends, never blocks, until it is built
/// }
/// ```
///
/// > Note: Swift resolves `value` by type, not by the caller's isolation, so the main actor's
/// > `async` code reads a `Sendable` value with `get()` too: it costs the same load once built.
///
/// The builder is released once a build succeeds and the value is published, with everything it
/// captured: a `MainLazy` held by an instance does not keep the objects its builder captured
/// alive once the value is built. It is kept while the value is unbuilt, since a build that
/// throws is retried. (The builder of a `static let` captures nothing, so keeping it would cost
/// nothing; releasing it leaves the `static let` statically initialized and its read unchanged.)
///
/// ``isBuilt`` and ``valueIfBuilt-5u0a4`` ask without building: for a shutdown path, a metrics read
/// or a test that must not trigger a build.
///
/// The built value lives as long as the `MainLazy`; in a `static let`, for the rest of the
/// process. It is destroyed on the main actor, where it was built: at once when the `MainLazy`
/// ends in main context, otherwise in a block sent to the main queue (so a value whose
/// `MainLazy` ends elsewhere is destroyed only if the main queue is served).
///
/// - Warning: Reading `value` from outside main context blocks until the main queue has built
///   it (``get()`` suspends instead), and deadlocks if the main queue is waiting for the
///   reading thread; see ``onceOnMain(token:file:line:_:)``. Reading `value` inside its own
///   builder stops the process with a message.
@_staticExclusiveOnly
public struct MainLazy<Value, Failure: Error>: ~Copyable {
  /// Odd until built, then the address of the built value. Written only by MainOnce.
  @usableFromInline
  let _storage: _OnceWord

  /// The builder, in its slot until a build succeeds. Only a build reads or writes the slot,
  /// in main context: it takes the builder out, puts it back if the builder threw, and
  /// otherwise hands it to the reader whose build it was, which releases it once the value is
  /// published. The engine runs one build of a cell at a time, each after the previous one
  /// ended, ordered by the word's compare-and-exchanges and the engine's lock (which
  /// ThreadSanitizer sees), so the slot is never contended.
  ///
  /// A `Mutex`, as the standard library's storage that can change while borrowed (uncontended:
  /// two uncontended atomic operations); wrapped in a struct, which keeps a `static let`
  /// statically initialized (a closure stored directly as the `Mutex`'s value is not).
  @usableFromInline
  let _builder: Mutex<_MainLazyBuilder<Value, Failure>>

  @usableFromInline
  let declaration: CallSite

  /// Creates a lazily built value.
  ///
  /// - Parameters:
  ///   - file: The file that declares the value, for diagnostics; leave the default.
  ///   - line: The line that declares the value, for diagnostics; leave the default.
  ///   - build: Builds the value, in main context. It runs until it returns a value once; after
  ///     it throws, the next read runs it again.
  @inlinable
  public init(
    file: StaticString = #fileID,
    line: UInt = #line,
    _ build: @escaping @MainActor @Sendable () throws(Failure) -> Value
  ) {
    _storage = _OnceWord()
    _builder = Mutex(_MainLazyBuilder(build))
    declaration = CallSite(file: file, line: line)
  }

  deinit {
    // Nothing borrows the value any more. Every caller borrowed it while it waited (a
    // `MainLazy` has no completion form), and a success is published through one that waits,
    // so a value that was built has been published: a load, and no lock, which may be held by
    // whoever releases this `MainLazy` (a closure let go under the engine's lock).
    guard _storage.isPublished else { return }
    // A `MainLazy` may end on any thread (it is `Sendable`), but a value that is not `Sendable`
    // belongs to the main actor, and so does its deinitialization.
    MainActorDisposal.destroy(
      UnsafeMutablePointer<Value>(bitPattern: _storage.value).unsafelyUnwrapped)
  }

  /// The built value, building it first if needed.
  @inlinable
  @inline(__always)
  func _builtValue() throws(Failure) -> Value {
    let word = _storage.value
    if _fastPath(word & 1 == 0) {
      return UnsafePointer<Value>(bitPattern: word).unsafelyUnwrapped.pointee
    }
    return try _mainLazyBuildSlowPath(self).pointee
  }

  /// Builds the value in main context, as ``onceOnMain(token:file:line:_:)`` runs an initializer.
  /// Blocks outside main context.
  ///
  /// Inlinable, so that the slow paths that call it are specialized in the caller's module:
  /// the build then needs no generic metadata at run time, and hands the engine a closure of
  /// a concrete type (``_mainLazyRun(_:valueType:declaration:_:)``).
  @inlinable
  @inline(__always)
  func _build() throws(Failure) {
    // The builder, once this reader's own build succeeded with it: released at the end of this
    // call, after the engine returned, so after the value was published.
    var taken = _MainLazyBuilder<Value, Failure>()
    let failure = _mainLazyRun(_storage, valueType: Value.self, declaration: declaration) {
      Self._attempt(_builder, handingBuilderTo: &taken)
    }
    // The error came from this reader's own build, whose builder throws `Failure`.
    if let failure { throw failure as! Failure }
    // Released here: a captured object's deinit may do anything, and the value is published.
    _ = consume taken
  }

  /// One build, in main context: takes the builder out of `slot`, runs it, and returns the
  /// address of the value it built, which the engine publishes. The builder goes to `taken`, for
  /// the reader whose build this is to release once the value is published; a builder that
  /// throws goes back into its slot before the build ends, for the next build.
  ///
  /// Only a build reads or writes the slot, and the engine runs one build of a cell at a time,
  /// each after the previous one ended (see ``_builder``).
  @MainActor
  @inlinable
  @inline(__always)
  static func _attempt(
    _ slot: borrowing Mutex<_MainLazyBuilder<Value, Failure>>,
    handingBuilderTo taken: inout _MainLazyBuilder<Value, Failure>
  ) -> Result<UInt, any Error> {
    guard let build = _MainLazyBuilder.take(from: slot).build else { _mainLazyBuilderIsGone() }
    let value: Value
    do {
      value = try build()
    } catch {
      _MainLazyBuilder(build).putBack(into: slot)
      return .failure(error)
    }
    let built = _mainLazyAllocate(
      byteCount: MemoryLayout<Value>.size, alignment: MemoryLayout<Value>.alignment)
    built.initializeMemory(as: Value.self, to: value)
    taken = _MainLazyBuilder(build)
    return .success(UInt(bitPattern: built))
  }

  /// Waits for the value to be built in main context without blocking: the caller is not in
  /// main context. Its build is queued as an async caller's attempt at a token is, but the wait
  /// is not cancellable: like `Task.value`, it ends when the value is built or this reader's
  /// build throws.
  func awaitBuild(site: CallSite) async throws(Failure) {
    let cell = cell
    // This is safe because the lazy value stays borrowed until this returns, and the build
    // uses the slot's address only before the reader is resolved: its storage outlives it.
    let read = _MainLazyRead<Value, Failure>(slot: withUnsafePointer(to: _builder) { $0 })
    let resolution = await withUnsafeContinuation { continuation in
      let waiter = Waiter(
        site: site, label: cell.label, kind: .task(continuation), attempt: { read.attempt() },
        storage: cell.word)
      if !MainQueueEngine.enqueue(waiter, for: cell) { continuation.resume(returning: .done) }
    }
    switch resolution {
    case .done:
      // If this reader's build succeeded, it handed the reader its builder before the value
      // was published with a releasing store: this acquiring load of the word orders the read
      // of the builder after that hand-over. The continuation's resumption orders it too, but
      // ThreadSanitizer does not see that (a race the tests reported without this load).
      _ = _storage.value
      read.releaseBuilder()
    // The error came from this reader's own build, whose builder throws `Failure`.
    case .failed(let error): throw error as! Failure
    case .cancelled:
      Diagnostics.internalInconsistency("an async reader of a MainLazy was resolved as cancelled")
    }
  }

  /// The value's cell. Every call that reaches the engine for a lazy value gets its cell here,
  /// so the deadlock detector is installed first.
  var cell: OnceCell {
    lazyCell(_storage, valueType: Value.self, declaration: declaration)
  }
}

/// Runs `attempt`, one build of the lazy value whose storage is `storage`, unless the value is
/// built, and returns once it is built (`nil`) or this build threw (its error). Blocks outside
/// main context. The part of a ``MainLazy``'s build that is not generic: what it gives the
/// engine has concrete types. A read's call site is the declaration: a read that blocks or
/// re-enters is named by the value it reads.
@usableFromInline
func _mainLazyRun(
  _ storage: borrowing _OnceWord, valueType: any Any.Type, declaration: CallSite,
  _ attempt: @MainActor () -> Result<UInt, any Error>
) -> (any Error)? {
  let cell = lazyCell(storage, valueType: valueType, declaration: declaration)
  return MainQueueEngine.run(cell, site: declaration) { MainActor.runIsolated(attempt) }
}

/// The cell of a lazy value, as a caller that borrows its storage sees it. The deadlock
/// detector is installed first.
private func lazyCell(
  _ storage: borrowing _OnceWord, valueType: any Any.Type, declaration: CallSite
) -> OnceCell {
  _ = detectorIsInstalled
  return OnceCell(
    word: storage.address,
    label: .lazy(valueType: TypeName(valueType), declaration: declaration))
}

/// Room for a built value of `byteCount` bytes aligned to `alignment`, freed with `free` (see
/// ``MainActorDisposal``). Aligned to at least 2, so that the address is even: a done word (see
/// OnceCell.swift).
///
/// `malloc` where its own alignment is enough, as it is for every alignment up to 16 on Linux:
/// `UnsafeMutableRawPointer.allocate` takes the Swift runtime's aligned path for those
/// (`posix_memalign`), which costs a first read more (Benchmarks/README.md, group `in-place`).
@usableFromInline
func _mainLazyAllocate(byteCount: Int, alignment: Int) -> UnsafeMutableRawPointer {
  // At least one byte: `malloc(0)` may return `nil`.
  guard alignment <= MemoryLayout<max_align_t>.alignment, let built = malloc(max(1, byteCount))
  else { return allocateAligned(byteCount: max(1, byteCount), alignment: alignment) }
  return built
}

/// ``_mainLazyAllocate(byteCount:alignment:)`` for an alignment that `malloc` does not promise,
/// and where `malloc` failed; stops the process if there is no memory.
@inline(never)
private func allocateAligned(byteCount: Int, alignment: Int) -> UnsafeMutableRawPointer {
  var built: UnsafeMutableRawPointer?
  guard posix_memalign(&built, max(alignment, MemoryLayout<max_align_t>.alignment), byteCount) == 0,
    let built
  else { fatalError("MainOnce: no memory for a MainLazy's value of \(byteCount) bytes.") }
  return built
}

/// Stops the process: a build found no builder in its slot, which only a build that succeeded
/// leaves empty.
@usableFromInline
func _mainLazyBuilderIsGone() -> Never {
  Diagnostics.internalInconsistency("a MainLazy's build found its builder released")
}

/// A reader that waits without blocking: its build, queued with its attempt, and the builder
/// that build took if it succeeded.
final class _MainLazyRead<Value, Failure: Error> {
  /// The lazy value's builder slot, valid while the reader borrows the lazy value.
  private let slot: UnsafePointer<Mutex<_MainLazyBuilder<Value, Failure>>>
  /// The builder, once this reader's build succeeded with it.
  private var taken = _MainLazyBuilder<Value, Failure>()

  init(slot: UnsafePointer<Mutex<_MainLazyBuilder<Value, Failure>>>) {
    self.slot = slot
  }

  /// The reader's build, run by the engine in main context.
  func attempt() -> Result<UInt, any Error> {
    MainActor.runIsolated { MainLazy._attempt(slot.pointee, handingBuilderTo: &taken) }
  }

  /// Releases the builder if this reader's build succeeded: the value is published.
  func releaseBuilder() {
    taken = _MainLazyBuilder()
  }
}

// This is safe because `taken` is written only by the reader's build, in main context, before
// the value is published and the engine resolves the reader, and read only by the reader after
// it was resolved and loaded the published word (an acquiring load: see `awaitBuild(site:)`);
// `slot` never changes.
extension _MainLazyRead: @unchecked Sendable {}

/// A ``MainLazy``'s builder, or `nil` while a build runs it and once a build succeeded.
///
/// A struct, not the optional closure itself, as the `Mutex`'s value: a `static let` holding a
/// `Mutex` of a struct with a closure is statically initialized (Swift 6.3.1, checked with
/// `objdump`), one of a bare closure is not.
@usableFromInline
struct _MainLazyBuilder<Value, Failure: Error>: Sendable {
  @usableFromInline
  var build: (@MainActor @Sendable () throws(Failure) -> Value)?

  @inlinable
  init(_ build: @escaping @MainActor @Sendable () throws(Failure) -> Value) {
    self.build = build
  }

  /// No builder.
  @inlinable
  init() {
    build = nil
  }

  /// Takes the builder out of `slot`, leaving `nil` there. Not isolated, as
  /// ``putBack(into:)`` is not: a closure that the main actor's code hands to
  /// `Mutex.withLock` would check its executor at run time.
  @inlinable
  static func take(from slot: borrowing Mutex<Self>) -> Self {
    // The slot, not the optional closure in it: returning that closure through the `Mutex`'s
    // closure crashes the compilers of Swift 6.0 and 6.2 (an assertion in SILGen).
    slot.withLock { slot in
      defer { slot.build = nil }
      return slot
    }
  }

  /// Puts the builder back into `slot`, which a build left empty.
  @inlinable
  func putBack(into slot: borrowing Mutex<Self>) {
    slot.withLock { $0 = self }
  }
}

extension MainLazy {
  /// Whether the value is built. Never builds it.
  ///
  /// Once `true`, it stays `true`, and everything the builder wrote happens before the read
  /// that returned it. It is `false` while a build is in flight, and after a build that threw.
  ///
  /// Once built this is one acquiring load, inlined into the caller; before, it takes
  /// MainOnce's lock, as a token's ``MainOnceToken/isDone`` does. It never blocks on the main
  /// queue, so it cannot deadlock, and it may be read in any context, `async` code included.
  @inlinable
  public var isBuilt: Bool {
    _storage.isDone
  }

  /// The value if it is built, otherwise `nil`, without building it.
  @inlinable
  @inline(__always)
  func _valueIfBuilt() -> Value? {
    let word = _storage.value
    if _fastPath(word & 1 == 0) {
      return UnsafePointer<Value>(bitPattern: word).unsafelyUnwrapped.pointee
    }
    return _mainLazyValueIfBuiltSlowPath(self)
  }

  /// The value if it is built, otherwise `nil`. Never builds it. A value that is not
  /// `Sendable` stays on the main actor.
  ///
  /// Everything the builder wrote happens before a read that returns the value. Once built,
  /// this is one acquiring load and one load, inlined; before, it takes MainOnce's lock, and
  /// never blocks on the main queue.
  @MainActor
  @inlinable
  public var valueIfBuilt: Value? {
    _valueIfBuilt()
  }
}

extension MainLazy where Value: Sendable {
  /// The value if it is built, otherwise `nil`. Never builds it. Safe to read from any thread,
  /// in synchronous and `async` code alike.
  ///
  /// Use it where a read must not trigger a build: a shutdown path saves what exists, a metrics
  /// read reports what is there. `if let stack = Stores.render.valueIfBuilt { … }`.
  ///
  /// Everything the builder wrote happens before a read that returns the value. Once built,
  /// this is one acquiring load and one load, inlined into the caller; before, it takes
  /// MainOnce's lock for a few instructions. It never waits for a build in flight (that read
  /// returns `nil`) and never blocks on the main queue, so it cannot deadlock.
  @inlinable
  public var valueIfBuilt: Value? {
    _valueIfBuilt()
  }
}

/// The slow path of ``MainLazy/valueIfBuilt``: asks MainOnce's lock whether a build has just
/// finished; never builds.
@usableFromInline
@inline(never)
func _mainLazyValueIfBuiltSlowPath<Value, Failure: Error>(
  _ lazy: borrowing MainLazy<Value, Failure>
) -> Value? {
  guard lazy._storage._isDoneSlowPath() else { return nil }
  return UnsafePointer<Value>(bitPattern: lazy._storage.value).unsafelyUnwrapped.pointee
}

/// The slow path of ``MainLazy/value``: a free function, so that the inlined fast path passes
/// the lazy value's address in an argument register and needs no stack frame. Specialized in
/// the caller's module for its `Value` and `Failure` (and not inlined there), as a token's slow
/// path is: a generic build would look up the metadata of its types at run time.
@inlinable
@inline(never)
func _mainLazyBuildSlowPath<Value, Failure: Error>(
  _ lazy: borrowing MainLazy<Value, Failure>
) throws(Failure) -> UnsafePointer<Value> {
  try lazy._build()
  return UnsafePointer(bitPattern: lazy._storage.value).unsafelyUnwrapped
}

/// The slow path of ``MainLazy/value`` for a builder that cannot throw: a function that does
/// not throw, so that the fast path inlined into the caller keeps no error register (a
/// `throws(Never)` call still has a throwing function's convention).
@inlinable
@inline(never)
func _mainLazyBuildSlowPath<Value>(
  neverThrowing lazy: borrowing MainLazy<Value, Never>
) -> UnsafePointer<Value> {
  lazy._build()
  return UnsafePointer(bitPattern: lazy._storage.value).unsafelyUnwrapped
}

extension MainLazy where Value: Sendable {
  /// The value, built in main context on first use. Safe to read from any thread, in
  /// synchronous code.
  ///
  /// Once built, this is one acquiring load and one load, inlined into the caller. The
  /// builder's writes happen before every return.
  ///
  /// - Throws: The error the builder threw, if this reader's build threw; the next read
  ///   builds again.
  /// - Warning: Outside main context, a read before the value is built blocks the thread until
  ///   the main queue has built it, and deadlocks if the main queue waits for that thread. So it
  ///   is unavailable in `async` code, where it would block a thread of the cooperative pool:
  ///   read with ``get()`` there, which suspends instead.
  @available(
    *, noasync,
    message:
      "use 'try await get()' in async code: it builds in place on the main actor, and elsewhere suspends instead of blocking a thread"
  )
  @inlinable
  public var value: Value {
    get throws(Failure) { try _builtValue() }
  }
}

extension MainLazy where Failure == Never {
  /// ``_builtValue()`` for a builder that cannot throw.
  ///
  /// The `value` overloads for `Never` are separate, and not the throwing ones read without
  /// `try`: Swift 6.3.1 crashes compiling a read without `try` of a noncopyable type's
  /// `throws(Never)` getter.
  @inlinable
  @inline(__always)
  func _builtValueNeverThrowing() -> Value {
    let word = _storage.value
    if _fastPath(word & 1 == 0) {
      return UnsafePointer<Value>(bitPattern: word).unsafelyUnwrapped.pointee
    }
    return _mainLazyBuildSlowPath(neverThrowing: self).pointee
  }
}

extension MainLazy where Value: Sendable, Failure == Never {
  /// The value, built in main context on first use. Safe to read from any thread, in
  /// synchronous code.
  ///
  /// Once built, this is one acquiring load and one load, inlined into the caller. The
  /// builder's writes happen before every return.
  ///
  /// - Warning: Outside main context, a read before the value is built blocks the thread until
  ///   the main queue has built it, and deadlocks if the main queue waits for that thread. So it
  ///   is unavailable in `async` code, where it would block a thread of the cooperative pool:
  ///   read with ``get()`` there, which suspends instead.
  @available(
    *, noasync,
    message:
      "use 'await get()' in async code: it builds in place on the main actor, and elsewhere suspends instead of blocking a thread"
  )
  @inlinable
  public var value: Value {
    _builtValueNeverThrowing()
  }
}

extension MainLazy where Value: Sendable {
  #if compiler(>=6.2)
    /// The value, built in main context on first use, for `async` code: waits without blocking.
    ///
    /// ```swift
    /// func drawLater() async throws {  // any task
    ///   let database = try await Stores.database.get()
    ///   database.record("frame drawn")
    /// }
    /// ```
    ///
    /// It runs on the caller's actor (`nonisolated(nonsending)`), so on the main actor it never
    /// suspends:
    ///
    /// - **Built:** returns at once: one acquiring load and one load, inlined.
    /// - **On the main actor** (or other main-context code): the builder runs right here, as a
    ///   read of `value` runs it.
    /// - **Anywhere else:** the read queues its build, sends one asynchronous hop to the main queue
    ///   if none is on its way, and suspends until the value is built or its own build throws. No
    ///   thread is blocked.
    ///
    /// The builder's writes happen before every return. The wait is not cancellable, as
    /// `Task.value` is not: a cancelled task waits for the build, which depends only on the main
    /// queue being served.
    ///
    /// This read cannot deadlock on the main queue: it never blocks a thread. It does not end
    /// while the main queue is not served, and a builder that awaits its own value never ends.
    ///
    /// - Throws: The error the builder threw, if this reader's build threw; the next read
    ///   builds again.
    @inlinable
    public nonisolated(nonsending) func get() async throws(Failure) -> Value {
      let word = _storage.value
      if _fastPath(word & 1 == 0) {
        return UnsafePointer<Value>(bitPattern: word).unsafelyUnwrapped.pointee
      }
      return try await _mainLazyAwaitSlowPath(self, isolation: #isolation)
    }
  #else
    /// The value, built in main context on first use, for `async` code; the form for Swift
    /// before 6.2, which has no `nonisolated(nonsending)`: it runs on the caller's actor through
    /// `isolation`, as the form above does, with the same guarantees.
    ///
    /// - Parameter isolation: The caller's actor; leave the default.
    /// - Returns: The value.
    /// - Throws: The error the builder threw, if this reader's build threw; the next read
    ///   builds again.
    @inlinable
    public func get(isolation: isolated (any Actor)? = #isolation) async throws(Failure) -> Value {
      let word = _storage.value
      if _fastPath(word & 1 == 0) {
        return UnsafePointer<Value>(bitPattern: word).unsafelyUnwrapped.pointee
      }
      return try await _mainLazyAwaitSlowPath(self, isolation: isolation)
    }
  #endif
}

/// The slow path of ``MainLazy/get()``: builds in place in main context, otherwise waits for
/// the main queue to build without blocking.
@usableFromInline
@inline(never)
func _mainLazyAwaitSlowPath<Value: Sendable, Failure: Error>(
  _ lazy: borrowing MainLazy<Value, Failure>, isolation: isolated (any Actor)?
) async throws(Failure) -> Value {
  if MainContext.isCurrent {
    try lazy._build()
  } else {
    try await lazy.awaitBuild(site: lazy.declaration)
  }
  return UnsafePointer<Value>(bitPattern: lazy._storage.value).unsafelyUnwrapped.pointee
}

extension MainLazy {
  /// The value, built on first use. A value that is not `Sendable` stays on the main actor.
  ///
  /// - Throws: The error the builder threw, if this reader's build threw; the next read
  ///   builds again.
  @MainActor
  @inlinable
  public var value: Value {
    get throws(Failure) { try _builtValue() }
  }
}

extension MainLazy where Failure == Never {
  /// The value, built on first use. A value that is not `Sendable` stays on the main actor.
  @MainActor
  @inlinable
  public var value: Value {
    _builtValueNeverThrowing()
  }
}

// This is safe because the builder only runs in main context, the built value is only handed
// out on the main actor unless it is `Sendable`, and it is destroyed on the main actor
// (`MainActorDisposal`), wherever the `MainLazy` ends.
extension MainLazy: @unchecked Sendable {}

/// Destroys values built on the main actor, on the main actor.
enum MainActorDisposal {
  /// Deinitializes and frees `built`, a value allocated by a `MainLazy`'s build: here in main
  /// context, otherwise in a block sent to the main queue.
  static func destroy<Value>(_ built: UnsafeMutablePointer<Value>) {
    let disposal = Disposal {
      built.deinitialize(count: 1)
      free(built)
    }
    if MainContext.isCurrent { return disposal.body() }
    // This is safe because the disposal, and `built` with it, is handed over whole: once sent,
    // nothing here refers to either, and the block is the only code that uses them.
    mainonce_main_queue_async(Unmanaged.passRetained(disposal).toOpaque()) { context in
      Unmanaged<Disposal>.fromOpaque(context!).takeRetainedValue().body()
    }
  }

  private final class Disposal {
    let body: () -> Void
    init(_ body: @escaping () -> Void) { self.body = body }
  }
}
