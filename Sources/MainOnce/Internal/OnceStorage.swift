public import Synchronization

/// The two words behind every once-cell (a token, a ``MainLazy``, a per-object call site).
///
/// `state` is what the fast path reads: zero until a caller has *published* a successful
/// initialization, then the non-zero value that initializer produced (1 for a token, the built
/// value's address for a ``MainLazy``). `flight` holds, while the cell is not published, a
/// retained ``Flight``: the record of the calls in progress.
///
/// The storage never hands out its address beyond a borrow. Everything that can outlive a caller
/// (an asynchronous hop, a completion handler, a cancelled waiter) holds the ``Flight``, which
/// knows nothing of the storage. So the storage may be moved or freed while work is still in
/// flight; that work goes on, answers its callers, and simply cannot publish into storage that
/// is gone. Publication is done by a caller that borrows the storage (see ``Cell/settle()``).
@usableFromInline
struct _OnceStorage: ~Copyable, Sendable {
  @usableFromInline
  let state: Atomic<UInt>

  /// Zero, or a `Flight` retained by this storage. Read and written only under
  /// ``Registry/shared``'s lock, and in `deinit`, which has the storage to itself.
  @usableFromInline
  let flight: Atomic<UInt>

  @inlinable
  init() {
    state = Atomic(0)
    flight = Atomic(0)
  }

  deinit {
    Flight.releaseAttached(flight.load(ordering: .relaxed))
  }

  /// The published value, or zero: one acquiring load.
  @inlinable
  @inline(__always)
  var published: UInt {
    state.load(ordering: .acquiring)
  }

  /// Whether a successful initialization has been published here: one acquiring load.
  @inlinable
  @inline(__always)
  var isPublished: Bool {
    published != 0
  }

  /// Whether an initialization has succeeded here: published, or finished by a flight that no
  /// caller has published yet (which this publishes). One acquiring load when published; one
  /// more relaxed load when no flight is attached; a lock otherwise.
  @inlinable
  @inline(__always)
  var isDone: Bool {
    isPublished || (flight.load(ordering: .relaxed) != 0 && _publishIfFinished())
  }

  @usableFromInline
  @inline(never)
  func _publishIfFinished() -> Bool {
    let storage = address
    return Registry.shared.withLock { _ in Cell.publishIfFinished(storage) }
  }

  /// The storage's address, for a caller that borrows the storage for as long as it uses it.
  ///
  /// The address outlives `withUnsafePointer`'s closure. This is safe because the storage
  /// holds `Atomic`s, which have raw layout: a borrowed value of such a type is always passed
  /// by address and never copied, so the address is the storage's own, and it stays put until
  /// the borrow ends.
  var address: UnsafePointer<_OnceStorage> {
    withUnsafePointer(to: self) { $0 }
  }

  /// The value of the initializer that succeeded for this storage, published or not, or zero:
  /// for a storage that owns the value (a ``MainLazy``'s or ``AsyncMainLazy``'s) to free it
  /// at its end. A flight never dereferences its outcome, so this is the only owner.
  func builtValue() -> UInt {
    if isPublished { return published }
    let storage = address
    return Registry.shared.withLock { _ in Flight.attached(to: storage)?.outcome ?? 0 }
  }

  /// The cell this storage backs, for a caller that borrows the storage for longer than the
  /// cell is used: a blocking call, or an async call across its suspension.
  func cell(label: CellLabel) -> Cell {
    Cell(storage: address, label: label)
  }
}

/// A once-cell as a caller borrows it: its storage and its name in diagnostics.
///
/// Valid only for the length of the caller's borrow, which pins the storage in place; nothing
/// that can outlive the call may keep a `Cell`.
struct Cell {
  let storage: UnsafePointer<_OnceStorage>
  let label: CellLabel

  var isPublished: Bool { storage.pointee.isPublished }

  /// The flight to join, made and attached if the cell has none; `nil` if the cell is done.
  /// A flight that has finished is published here first. Call under the registry lock.
  func flight(policy: OnceEngine.Policy) -> Flight? {
    if Self.publishIfFinished(storage) { return nil }
    if let attached = Flight.attached(to: storage) { return attached }
    let flight = Flight(label: label, policy: policy)
    storage.pointee.flight.store(flight.retainedForStorage(), ordering: .relaxed)
    return flight
  }

  /// Publishes the cell if its flight has succeeded and nobody has published it yet. Every call
  /// that ends because the cell is done ends here, while it still borrows the storage.
  func settle() {
    if isPublished { return }
    Registry.shared.withLock { _ in _ = Self.publishIfFinished(storage) }
  }

  /// Whether the cell is done, publishing it first if its flight has succeeded: the value is
  /// stored with a releasing store, and the storage lets go of the finished flight. Call under
  /// the registry lock, while the storage is borrowed.
  static func publishIfFinished(_ storage: UnsafePointer<_OnceStorage>) -> Bool {
    if storage.pointee.isPublished { return true }
    guard let flight = Flight.attached(to: storage), let value = flight.outcome else {
      return false
    }
    storage.pointee.state.store(value, ordering: .releasing)
    storage.pointee.flight.store(0, ordering: .relaxed)
    flight.releaseFromStorage()
    return true
  }
}

/// How MainOnce names a cell in messages.
enum CellLabel: Sendable, CustomStringConvertible {
  case token(name: StaticString, declaration: CallSite)
  case lazy(typeName: String, declaration: CallSite)
  case object(typeName: String, site: CallSite, operation: StaticString)
  case asyncLazy(typeName: String, declaration: CallSite)

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

  /// Where the cell was declared, or for a per-object cell, its call site.
  var declaration: CallSite {
    switch self {
    case .token(_, let declaration), .lazy(_, let declaration), .asyncLazy(_, let declaration):
      declaration
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
      name.utf8CodeUnitCount == 0
        ? "token declared at \(declaration)" : "token \"\(name)\" (\(declaration))"
    case .lazy(let typeName, let declaration):
      "MainLazy<\(typeName)> declared at \(declaration)"
    case .object(let typeName, let site, let operation):
      "\(operation) at \(site) for a \(typeName)"
    case .asyncLazy(let typeName, let declaration):
      "AsyncMainLazy<\(typeName)> declared at \(declaration)"
    }
  }
}
