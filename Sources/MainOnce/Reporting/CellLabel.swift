#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Musl)
  internal import Musl
#elseif canImport(Darwin)
  internal import Darwin
#endif

/// How MainOnce names a once-cell in messages.
///
/// Built on the slow path only, from what the cell keeps for diagnostics; rendered only when a
/// message is written.
enum CellLabel: Sendable, CustomStringConvertible {
  case token(name: StaticText?, declaration: DeclarationSite)
  case lazy(valueType: TypeName, declaration: CallSite)
  case object(objectType: TypeName, site: DeclarationSite, operation: StaticString)
  case asyncLazy(valueType: TypeName, declaration: CallSite)

  /// The API whose caller waits for such a cell, for reports.
  var operation: StaticString {
    switch self {
    case .token: "onceOnMain(token:)"
    case .lazy: "MainLazy.value"
    case .object(_, _, let operation): operation
    case .asyncLazy: "AsyncMainLazy.get()"
    }
  }

  /// The wait that never initializes, as reports name it.
  var waitOperation: String {
    switch self {
    case .token: "MainOnceToken.wait()"
    case .lazy: "MainLazy.wait()"
    case .asyncLazy: "AsyncMainLazy.wait()"
    case .object: "wait()"
    }
  }

  /// What runs for this cell, for reports: "the initializer of token …".
  var work: String {
    switch self {
    case .token: "initializer"
    case .lazy, .asyncLazy: "builder"
    case .object(_, _, let operation): "\(operation)" == "runOnce(for:)" ? "body" : "initializer"
    }
  }

  /// The call site a stop is attributed to when no caller's is at hand: the declaration of a
  /// lazy value. `nil` for a token or a call site, whose callers pass theirs.
  var attribution: CallSite? {
    switch self {
    case .token, .object: nil
    case .lazy(_, let declaration), .asyncLazy(_, let declaration): declaration
    }
  }

  /// Whether calls for this cell pass their call site (`MainLazy.value`, a property, cannot).
  var hasCallSites: Bool {
    switch self {
    case .lazy: false
    case .token, .object, .asyncLazy: true
    }
  }

  var description: String {
    switch self {
    case .token(let name, let declaration):
      guard let name, !name.isEmpty else { return "token declared at \(declaration)" }
      return "token \"\(name)\" (\(declaration))"
    case .lazy(let valueType, let declaration):
      return "MainLazy<\(valueType)> declared at \(declaration)"
    case .object(let objectType, let site, let operation):
      return "\(operation) at \(site) for a \(objectType)"
    case .asyncLazy(let valueType, let declaration):
      return "AsyncMainLazy<\(valueType)> declared at \(declaration)"
    }
  }
}

/// A type, named only when a message is written: rendering a generic type's name costs about
/// half a microsecond, most of a first call's bookkeeping.
struct TypeName: CustomStringConvertible {
  let type: Any.Type

  init(_ type: Any.Type) { self.type = type }

  var description: String { String(describing: type) }
}

/// A NUL-terminated string in the binary's constant data, as a `StaticString` literal is: kept
/// as one pointer, so that a token stays small.
@usableFromInline
struct StaticText: CustomStringConvertible {
  @usableFromInline
  let start: UnsafeRawPointer

  @inlinable
  init?(_ string: StaticString) {
    guard string.hasPointerRepresentation else { return nil }
    start = UnsafeRawPointer(string.utf8Start)
  }

  var isEmpty: Bool { start.load(as: UInt8.self) == 0 }

  @usableFromInline
  var description: String { String(cString: start.assumingMemoryBound(to: CChar.self)) }
}

/// Where something was declared or called, as `#fileID:line` (and a column, for a per-object
/// call site), kept in two words: for text only.
@usableFromInline
struct DeclarationSite: Sendable, Hashable, CustomStringConvertible {
  @usableFromInline
  let file: StaticText?
  @usableFromInline
  let line: UInt32
  @usableFromInline
  let column: UInt32

  @inlinable
  init(file: StaticString, line: UInt, column: UInt = 0) {
    self.file = StaticText(file)
    self.line = UInt32(truncatingIfNeeded: line)
    self.column = UInt32(truncatingIfNeeded: column)
  }

  init(_ site: CallSite) {
    self.init(file: site.file, line: site.line, column: site.column)
  }

  @usableFromInline
  var description: String {
    let file = file.map { "\($0)" } ?? "?"
    return column == 0 ? "\(file):\(line)" : "\(file):\(line):\(column)"
  }

  /// Equal sites: the same line and column, and the same file name. The same `#fileID` may be
  /// emitted at two addresses when a call is inlined into another module, so the names are
  /// compared when the addresses differ.
  @usableFromInline
  static func == (lhs: Self, rhs: Self) -> Bool {
    guard lhs.line == rhs.line, lhs.column == rhs.column else { return false }
    switch (lhs.file, rhs.file) {
    case (nil, nil): return true
    case (let left?, let right?):
      return left.start == right.start
        || strcmp(
          left.start.assumingMemoryBound(to: CChar.self),
          right.start.assumingMemoryBound(to: CChar.self)) == 0
    default: return false
    }
  }

  /// Hashes the line and column, which equal sites share, so that a lookup does not hash the
  /// name.
  @usableFromInline
  func hash(into hasher: inout Hasher) {
    hasher.combine(line)
    hasher.combine(column)
  }
}

// This is safe because a metatype is an immutable, process-wide value.
extension TypeName: @unchecked Sendable {}

// This is safe because the text is a literal: constant data, never written or freed.
extension StaticText: @unchecked Sendable {}
