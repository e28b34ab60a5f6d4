/// How MainOnce names a once-cell in messages.
///
/// Built on the slow path only, from what the cell keeps for diagnostics; rendered only when a
/// message is written.
enum CellLabel: Sendable, CustomStringConvertible {
  case token(name: StaticText?, declaration: DeclarationSite)
  case lazy(valueType: TypeName, declaration: CallSite)
  case object(objectType: TypeName, site: CallSite, operation: StaticString)
  case asyncLazy(valueType: TypeName, declaration: CallSite)

  /// The API whose caller waits for such a cell, for reports.
  var operation: StaticString {
    switch self {
    case .token: "onceOnMain(token:)"
    case .lazy: "MainLazy.value"
    case .object(_, _, let operation): operation
    case .asyncLazy: "AsyncMainLazy.value"
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
  /// lazy value, or a per-object call site. `nil` for a token, whose callers pass theirs.
  var attribution: CallSite? {
    switch self {
    case .token: nil
    case .lazy(_, let declaration), .asyncLazy(_, let declaration): declaration
    case .object(_, let site, _): site
    }
  }

  /// Whether calls for this cell pass their call site (`MainLazy.value`, a property, cannot).
  var hasCallSites: Bool {
    switch self {
    case .lazy, .asyncLazy: false
    case .token, .object: true
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

/// Where something was declared, as `#fileID:line`, kept in two words.
@usableFromInline
struct DeclarationSite: Sendable, CustomStringConvertible {
  @usableFromInline
  let file: StaticText?
  @usableFromInline
  let line: UInt32

  @inlinable
  init(file: StaticString, line: UInt) {
    self.file = StaticText(file)
    self.line = UInt32(truncatingIfNeeded: line)
  }

  @usableFromInline
  var description: String { "\(file.map { "\($0)" } ?? "?"):\(line)" }
}

// This is safe because a metatype is an immutable, process-wide value.
extension TypeName: @unchecked Sendable {}

// This is safe because the text is a literal: constant data, never written or freed.
extension StaticText: @unchecked Sendable {}
