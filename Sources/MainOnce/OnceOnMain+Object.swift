/// Runs `initializer` exactly once per lifetime of `object` for this call site, in main
/// context, and returns after it has run.
///
/// One-time code declared inline, scoped to one object: the call site (`#fileID`, `#line` and
/// `#column`) and the object together are the token.
///
/// ```swift
/// @MainActor
/// final class SettingsPanel {
///   func didAppear() {
///     onceOnMain(for: self) { self.buildControls() }  // once per panel
///   }
///
///   func buildControls() {}
/// }
/// ```
///
/// It behaves as ``onceOnMain(token:file:line:_:)`` does: concurrent callers wait for the one
/// initializer, which runs in main context; its writes happen before every return; a throwing
/// initializer leaves the call site fresh; calling the same site for the same object from inside
/// its own initializer stops the process with a message.
///
/// The initializer is main-actor code, so in the Swift 6 language mode a closure that uses
/// `self` needs `self` to be `Sendable` or main-actor isolated; otherwise capture only the parts
/// that are `Sendable` (`{ [mixer] in mixer.start() }`).
///
/// MainOnce holds `object` weakly and never keeps it alive. When `object` is deallocated, its
/// state goes with it: a new object, even one that happens to reuse the same address, runs its
/// call sites again. There is no way to reset a call site for a living object. From the
/// object's own `deinit` a call stops the process with a message: a weak reference to an object
/// being deinitialized reads as gone, as one to a freed object does, so MainOnce cannot tell
/// whether the site already ran (and `deinit` runs once anyway).
///
/// Once done, a call looks the call site up in a small cache of the calling thread's own and
/// checks, with two plain loads, that `object` is still the one the site ran for: no lock and
/// no write another thread sees, so threads on different objects do not slow each other down.
/// That costs a few times a token stored on the object (Benchmarks/README.md, group
/// `objects`). The first call from a thread takes a lock.
///
/// - Warning: Like the token form, this blocks outside main context and deadlocks if the main
///   queue waits for the caller; MainOnce reports the cycles it can see.
///
/// - Parameters:
///   - object: The object whose lifetime scopes the call.
///   - file: The call site's file; leave the default.
///   - line: The call site's line; leave the default.
///   - column: The call site's column; leave the default.
///   - initializer: The work to do once per object, in main context.
/// - Throws: The error `initializer` threw, if this caller's initializer ran and threw.
public func onceOnMain<Failure: Error>(
  for object: AnyObject,
  file: StaticString = #fileID,
  line: UInt = #line,
  column: UInt = #column,
  _ initializer: @MainActor () throws(Failure) -> Void
) throws(Failure) {
  let site = CallSite(file: file, line: line, column: column)
  if ObjectCells.isDone(object, at: site) { return }
  let cell = ObjectCells.cell(for: object, at: site, operation: "onceOnMain(for:)") {
    MainQueueObjectCell(object: $0, key: $1)
  }
  if cell.word.isPublished { return }
  _ = detectorIsInstalled
  let label = CellLabel.object(
    objectType: TypeName(type(of: object)), site: cell.site, operation: "onceOnMain(for:)")
  // `cell` is a class instance this call holds: its word stays in place until it returns.
  try withExtendedLifetime(cell) { () throws(Failure) in
    try MainQueueEngine.run(
      OnceCell(word: cell.word.address, label: label), site: site, throwing: Failure.self
    ) {
      MainQueueEngine.erase { () throws(Failure) in try runTokenInitializer(initializer) }
    }
  }
}

/// Runs `body` exactly once per lifetime of `object` for this call site, on the calling thread.
///
/// ```swift
/// final class Thumbnailer: Sendable {
///   func thumbnail(for path: String) {  // any thread
///     runOnce(for: self) { self.loadModel() }  // once per thumbnailer, here, on this thread
///   }
///
///   func loadModel() {}
/// }
/// ```
///
/// The twin of ``onceOnMain(for:file:line:column:_:)`` for work that may run anywhere: the first
/// caller runs `body` right where it is; concurrent callers for the same object and call site
/// wait until it has returned. If `body` throws, the call site stays fresh and the first waiting
/// caller runs its own `body` next. As with the main-context form, a call from the object's own
/// `deinit` stops the process with a message.
///
/// - Warning: Waiting callers block. Two call sites whose bodies wait for each other deadlock;
///   MainOnce stops the process with a report when it sees the cycle.
///
/// - Parameters:
///   - object: The object whose lifetime scopes the call.
///   - file: The call site's file; leave the default.
///   - line: The call site's line; leave the default.
///   - column: The call site's column; leave the default.
///   - body: The work to do once per object.
/// - Throws: The error `body` threw, if this caller's `body` ran and threw.
public func runOnce<Failure: Error>(
  for object: AnyObject,
  file: StaticString = #fileID,
  line: UInt = #line,
  column: UInt = #column,
  _ body: () throws(Failure) -> Void
) throws(Failure) {
  let site = CallSite(file: file, line: line, column: column)
  if ObjectCells.isDone(object, at: site) { return }
  let cell = ObjectCells.cell(for: object, at: site, operation: "runOnce(for:)") {
    RunOnceCell(object: $0, key: $1)
  }
  _ = detectorIsInstalled
  try cell.run(site: site, body)
}
