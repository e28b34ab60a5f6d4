public import Synchronization

/// A flag that lets ``onceOnMain(token:file:line:_:)`` run an initializer exactly once.
///
/// Declare a token as a `static let` or a global `let`, next to the state it guards (the forms
/// that do not block keep using its address until the initialization has finished, so it must
/// live that long):
///
/// ```swift
/// enum AudioEngine {
///   static let setupToken = MainOnceToken("audio setup")
/// }
/// ```
///
/// A token starts out fresh and becomes *done* when an initializer run for it returns normally.
/// Nothing makes a done token fresh again: there is no reset, and no way to mark a token done
/// without running an initializer. If an initializer throws, the token stays fresh.
///
/// A token is statically initialized: it holds one machine word, zero until it is done, and
/// reading it is one load, with no lazy-global check (a class in a `static let` costs a
/// `swift_once` call on every access on Linux; this struct does not).
///
/// The optional name and the place of declaration appear in MainOnce's diagnostics:
/// `token "audio setup" (Audio/Engine.swift:12)`.
public struct MainOnceToken: ~Copyable, Sendable {
  /// Zero while fresh; non-zero once an initializer has returned. Written only by MainOnce.
  @usableFromInline
  let _state: Atomic<UInt>

  @usableFromInline
  let name: StaticString

  @usableFromInline
  let declaration: CallSite

  /// Creates a fresh token.
  ///
  /// - Parameters:
  ///   - name: A name for diagnostics, such as `"core data stack"`. Defaults to none.
  ///   - file: The file that declares the token; leave the default.
  ///   - line: The line that declares the token; leave the default.
  @inlinable
  public init(_ name: StaticString = "", file: StaticString = #fileID, line: UInt = #line) {
    _state = Atomic(0)
    self.name = name
    declaration = CallSite(file: file, line: line)
  }

  /// Whether an initializer has run to completion for this token: one acquiring load.
  @inlinable
  @inline(__always)
  var _isDone: Bool {
    _state.load(ordering: .acquiring) != 0
  }

  /// Calls `body` with the token's cell: its state word's address and its label.
  func withCell<Result, Failure: Error>(
    _ body: (OnceCell) throws(Failure) -> Result
  ) throws(Failure) -> Result {
    let label = CellLabel.token(name: name, declaration: declaration)
    return try withUnsafePointer(to: _state) { (state) throws(Failure) in
      try body(OnceCell(state: state, label: label))
    }
  }
}
