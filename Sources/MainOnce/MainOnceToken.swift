/// A flag that lets ``onceOnMain(token:file:line:_:)`` run an initializer exactly once.
///
/// Declare a token as a `static let`, a global `let`, or a `let` property of the object whose
/// setup it guards:
///
/// ```swift
/// enum AudioEngine {
///   static let setupToken = MainOnceToken("audio setup")
/// }
/// ```
///
/// A token starts out fresh and becomes *done* when an initializer run for it returns normally.
/// Nothing makes a done token fresh again: there is no reset, and a token cannot be declared
/// with `var` (that would let an assignment replace a done token with a fresh one; the compiler
/// rejects it). If an initializer throws, the token stays fresh.
///
/// A token may go away while an initialization that does not block is still in flight, for
/// example when the object that holds it is released before the completion handler of
/// ``onceOnMain(token:completionQueue:file:line:_:completion:)-60dt3`` has run. The
/// initialization goes on, and every waiting caller and completion handler still gets its
/// answer; MainOnce never writes to a token after a caller stops borrowing it.
///
/// A token is 32 bytes and statically initialized: a `static let` of one is constant data, and
/// reading it is one load, with no lazy-global check (a class in a `static let` costs a
/// `swift_once` call on every access on Linux; this struct does not). It holds one state word
/// (its states and transitions are in <doc:HowATokenMoves>) and, for diagnostics, pointers to
/// its name and to the file that declares it.
///
/// The optional name and the place of declaration appear in MainOnce's diagnostics:
/// `token "audio setup" (Audio/Engine.swift:12)`.
@_staticExclusiveOnly
public struct MainOnceToken: ~Copyable, Sendable {
  @usableFromInline
  let _word: _OnceWord

  @usableFromInline
  let name: StaticText?

  @usableFromInline
  let declaration: DeclarationSite

  /// Creates a fresh token.
  ///
  /// - Parameters:
  ///   - name: A name for diagnostics, such as `"core data stack"`. Defaults to none.
  ///   - file: The file that declares the token; leave the default.
  ///   - line: The line that declares the token; leave the default.
  @inlinable
  public init(_ name: StaticString = "", file: StaticString = #fileID, line: UInt = #line) {
    _word = _OnceWord()
    self.name = StaticText(name)
    declaration = DeclarationSite(file: file, line: line)
  }

  /// Whether an initializer has run to completion for this token and been published: one
  /// acquiring load and a bit test. The fast path of every call.
  @inlinable
  @inline(__always)
  var _isDone: Bool {
    _word.isPublished
  }

  /// Whether an initializer has run to completion for this token.
  ///
  /// Use it for assertions and to skip work that is already set up. Once `true`, it stays
  /// `true`, and everything the initializer wrote happens before the read that returned it.
  ///
  /// When the token is done this is one acquiring load. Before, it takes MainOnce's lock to
  /// ask whether an initialization has just finished that no caller has recorded in the token
  /// yet (a completion-form call's), so that it is `true` as soon as any caller could have seen
  /// the end: for example inside the completion handler of
  /// ``onceOnMain(token:completionQueue:file:line:_:completion:)-60dt3``.
  @inlinable
  public var isDone: Bool {
    _word.isDone
  }

  /// The token's cell, to use only while the token is borrowed. Every call that reaches the
  /// engine for a token gets its cell here, so the deadlock detector is installed first.
  var cell: OnceCell {
    _ = detectorIsInstalled
    return OnceCell(word: _word.address, label: .token(name: name, declaration: declaration))
  }
}
