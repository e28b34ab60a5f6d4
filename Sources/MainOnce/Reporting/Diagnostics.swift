/// Messages for misuse and for states MainOnce cannot recover from. They use `fatalError`,
/// whose text survives `-c release` (`precondition`'s does not), start with `MainOnce:`, and
/// name the caller's `#fileID:line`.
enum Diagnostics {
  /// An initializer reached its own cell again: it waits for itself. `waits`: the second call
  /// is a `wait()`, which brings no initializer.
  static func reentrance(
    _ label: CellLabel, firstCall: some CustomStringConvertible, secondCall: CallSite,
    waits: Bool = false
  ) -> Never {
    switch label {
    case .lazy:
      let (did, `do`) = waits ? ("waited for", "wait for") : ("read", "read")
      fail(
        """
        MainOnce: \(label) \(did) its own value while building it: the builder cannot finish \
        until that \(waits ? "wait" : "read") returns. Don't \(`do`) a MainLazy's value from \
        inside its own builder.
        """,
        at: secondCall)
    case .asyncLazy:
      let (did, `do`) = waits ? ("waited for", "wait for") : ("awaited", "await")
      fail(
        """
        MainOnce: \(label) \(did) its own value while building it, from the build's own task \
        or a child task it waits for (async let, a task group): the builder cannot finish \
        until that \(waits ? "wait" : "await") returns. Don't \(`do`) an AsyncMainLazy's value \
        from inside its own builder.
        """,
        at: secondCall)
    case .token, .object: break
    }
    fail(
      """
      MainOnce: re-entrant call for \(label): the call at \(secondCall) runs inside the \
      initializer started at \(firstCall), which cannot finish until this call returns. \
      Don't use a token from inside its own initializer; move that work out of the \
      initializer or give it a token of its own.
      """,
      at: secondCall)
  }

  /// An invariant of MainOnce itself does not hold.
  static func internalInconsistency(_ detail: String) -> Never {
    fatalError("MainOnce: internal inconsistency: \(detail). Please report this bug.")
  }

  /// Stops the process with `message`, attributed to the caller's call site where there is one.
  static func fail(_ message: String, at site: CallSite?) -> Never {
    guard let site else { fatalError(message) }
    fatalError(message, file: site.file, line: site.line)
  }
}
