import Dispatch

// Swift 6.0's Dispatch does not mark these two types `Sendable`; later ones do. The tests hand
// them between threads and tasks as the later ones allow.
#if !compiler(>=6.2)
  // This is safe because `DispatchTimeoutResult` is an enum without payloads: a plain value,
  // with nothing shared.
  extension DispatchTimeoutResult: @retroactive @unchecked Sendable {}

  // This is safe because a `DispatchSpecificKey` has no state of its own after `init`:
  // libdispatch uses only its address, as the key.
  extension DispatchSpecificKey: @retroactive @unchecked Sendable {}
#endif
