internal import Synchronization

/// A once-only state word and what to call it in diagnostics.
///
/// The word is zero until an initializer succeeds; then it holds the non-zero value the
/// initializer published (1 for a token, the value's address for a ``MainLazy``). Its address
/// identifies the cell while any call for it is in flight, which keeps the storage alive.
struct OnceCell: @unchecked Sendable {
  // This is safe because the state word is only read and written atomically, and it outlives
  // every use of the cell: a cell is only used while a call for it is in progress, and the
  // caller keeps the storage (a static token, a MainLazy, a per-object box) alive meanwhile.
  let state: UnsafePointer<Atomic<UInt>>
  let label: CellLabel

  var key: UnsafeRawPointer { UnsafeRawPointer(state) }

  var isDone: Bool { state.pointee.load(ordering: .acquiring) != 0 }

  func publish(_ value: UInt) {
    assert(value != 0, "a published value must be non-zero: zero means fresh")
    state.pointee.store(value, ordering: .releasing)
  }
}

/// How MainOnce names a cell in messages.
enum CellLabel: Sendable, CustomStringConvertible {
  case token(name: StaticString, declaration: CallSite)
  case lazy(typeName: String, declaration: CallSite)
  case object(typeName: String, site: CallSite, operation: StaticString)

  /// The API whose caller waits for such a cell, for reports.
  var operation: StaticString {
    switch self {
    case .token: "onceOnMain(token:)"
    case .lazy: "MainLazy.value"
    case .object(_, _, let operation): operation
    }
  }

  /// Whether calls for this cell pass their call site (`MainLazy.value`, a property, cannot).
  var hasCallSites: Bool {
    if case .lazy = self { false } else { true }
  }

  var description: String {
    switch self {
    case .token(let name, let declaration):
      name.utf8CodeUnitCount == 0
        ? "token declared at \(declaration)" : "token \"\(name)\" (\(declaration))"
    case .lazy(let typeName, let declaration):
      "MainLazy<\(typeName)> declared at \(declaration)"
    case .object(let typeName, let site, let operation):
      "\(operation) at \(site) for a \(typeName)"
    }
  }
}
