/// Where a MainOnce API was called from, as `#fileID:line` (and a column, for per-object keys).
///
/// Equality compares the file name's bytes when the addresses differ: the same `#fileID` may be
/// emitted at two addresses when a call site is inlined into another module. Hashing uses the
/// line, the column and the name's length, which equal sites share, so that a lookup does not
/// hash the name.
@usableFromInline
struct CallSite: Hashable, Sendable, CustomStringConvertible {
  let file: StaticString
  let line: UInt
  let column: UInt

  @usableFromInline
  init(file: StaticString, line: UInt, column: UInt = 0) {
    self.file = file
    self.line = line
    self.column = column
  }

  @usableFromInline
  var description: String { column == 0 ? "\(file):\(line)" : "\(file):\(line):\(column)" }

  @usableFromInline
  static func == (lhs: CallSite, rhs: CallSite) -> Bool {
    guard lhs.line == rhs.line, lhs.column == rhs.column,
      lhs.file.utf8CodeUnitCount == rhs.file.utf8CodeUnitCount
    else { return false }
    if lhs.file.utf8Start == rhs.file.utf8Start { return true }
    return lhs.file.withUTF8Buffer { left in
      rhs.file.withUTF8Buffer { right in left.elementsEqual(right) }
    }
  }

  @usableFromInline
  func hash(into hasher: inout Hasher) {
    hasher.combine(line)
    hasher.combine(column)
    hasher.combine(file.utf8CodeUnitCount)
  }
}
