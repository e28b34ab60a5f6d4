/// A value built once, in main context, the first time it is read.
///
/// Use it for "lazy singleton stacks": objects that must be created on the main queue (they
/// talk to a main-thread-only library, or hold `@MainActor` state) but are read from anywhere.
///
/// ```swift
/// enum Services {
///   static let database = MainLazy { DatabaseStack() }
/// }
///
/// let stack = Services.database.value  // any thread; built on first use
/// ```
///
/// The builder runs exactly as an initializer of ``onceOnMain(token:file:line:_:)`` does: once,
/// in main context, with concurrent readers waiting for it. Once built, reading `value` is one
/// acquiring load and one load through the published address: no lock and no hop. Like a
/// token, a `MainLazy` is statically initialized when declared as a `static let` with a
/// closure that captures nothing.
///
/// The built value lives as long as the `MainLazy`; in a `static let`, for the rest of the
/// process.
///
/// - Warning: Reading `value` from outside main context blocks until the main queue has built
///   it, and deadlocks if the main queue is waiting for the reading thread; see
///   ``onceOnMain(token:file:line:_:)``. Reading `value` inside its own builder stops the
///   process with a message.
@_staticExclusiveOnly
public struct MainLazy<Value>: ~Copyable {
  /// Zero until built, then the address of the built value. Written only by MainOnce.
  @usableFromInline
  let _storage: _OnceStorage

  @usableFromInline
  let build: @MainActor @Sendable () -> Value

  @usableFromInline
  let declaration: CallSite

  /// Creates a lazily built value.
  ///
  /// - Parameters:
  ///   - file: The file that declares the value, for diagnostics; leave the default.
  ///   - line: The line that declares the value, for diagnostics; leave the default.
  ///   - build: Builds the value. It runs at most once, in main context.
  @inlinable
  public init(
    file: StaticString = #fileID,
    line: UInt = #line,
    _ build: @escaping @MainActor @Sendable () -> Value
  ) {
    _storage = _OnceStorage()
    self.build = build
    declaration = CallSite(file: file, line: line)
  }

  deinit {
    if let built = UnsafeMutablePointer<Value>(bitPattern: _storage.builtValue()) {
      built.deinitialize(count: 1)
      built.deallocate()
    }
  }

  /// The built value, building it first if needed.
  @inlinable
  @inline(__always)
  var _builtValue: Value {
    let address = _storage.published
    if _fastPath(address != 0) {
      return UnsafePointer<Value>(bitPattern: address).unsafelyUnwrapped.pointee
    }
    return _mainLazyBuildSlowPath(self).pointee
  }

  /// Builds the value in main context, as ``onceOnMain(token:file:line:_:)`` runs an initializer.
  func build(site: CallSite) {
    let label = CellLabel.lazy(typeName: String(describing: Value.self), declaration: declaration)
    OnceEngine.run(_storage.cell(label: label), policy: .mainQueue, site: site) {
      MainActor.runIsolated { [build] in
        let built = UnsafeMutablePointer<Value>.allocate(capacity: 1)
        built.initialize(to: build())
        return UInt(bitPattern: built)
      }
    }
  }
}

/// The slow path of ``MainLazy/value``: a free function, so that the inlined fast path passes
/// the lazy value's address in an argument register and needs no stack frame.
@usableFromInline
@inline(never)
func _mainLazyBuildSlowPath<Value>(_ lazy: borrowing MainLazy<Value>) -> UnsafePointer<Value> {
  lazy.build(site: lazy.declaration)
  return UnsafePointer(bitPattern: lazy._storage.published).unsafelyUnwrapped
}

extension MainLazy where Value: Sendable {
  /// The value, built in main context on first use. Safe to read from any thread.
  ///
  /// Once built, this is one acquiring load and one load, inlined into the caller. The
  /// builder's writes happen before every return.
  @inlinable
  public var value: Value {
    _builtValue
  }
}

extension MainLazy {
  /// The value, built on first use. A value that is not `Sendable` stays on the main actor.
  @MainActor
  @inlinable
  public var value: Value {
    _builtValue
  }
}

// This is safe because the builder only runs in main context, and the built value is only
// handed out on the main actor unless it is `Sendable`.
extension MainLazy: @unchecked Sendable {}
