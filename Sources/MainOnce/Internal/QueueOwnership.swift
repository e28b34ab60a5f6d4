internal import Dispatch
internal import Synchronization

/// Which thread owns a serial dispatch queue right now, read from the queue's lock word.
///
/// libdispatch keeps a serial queue's owner in the low 30 bits of its `dq_state` word: the
/// kernel tid of the thread draining it or running `sync` on it, or, for the main queue before
/// `dispatchMain()`, of the main thread it is bound to. `dispatch_assert_queue` decides "am I on
/// this queue?" from the same word. There is no public way to ask that question without
/// trapping, and `DispatchQueue.getSpecific` cannot see a main-queue block that has entered
/// another queue's `sync`, so MainOnce reads the word itself.
///
/// The layout is verified before the first read: the main queue's serial number (1), width (1)
/// and label must sit at the expected offsets next to the word, and the Swift `DispatchQueue.main`
/// object must wrap the exported `_dispatch_main_q`. If any check fails (another libdispatch), or
/// `MAINONCE_QUEUE_INTROSPECTION=off` is set, ``isAvailable`` is false and MainOnce falls back to
/// public signals; see ``MainContext``.
enum QueueOwnership {
  /// Who owns a queue.
  enum Owner: Equatable {
    /// The queue is locked by this thread.
    case thread(ThreadID)
    /// Nobody is running the queue.
    case nobody
    /// MainOnce cannot read the queue's state.
    case unknown
  }

  // Offsets into `struct dispatch_queue_s` / `dispatch_lane_s` on 64-bit platforms.
  private static let stateOffset = 56
  private static let serialNumberOffset = 64
  private static let labelOffset = 72
  private static let widthOffset = 80
  // The Swift overlay's `DispatchQueue` object: header (metadata, refcount), then the C queue.
  private static let wrappedQueueOffset = 16
  private static let ownerMask: UInt64 = 0x3fff_ffff

  /// The address of the C main queue once its layout has been verified; `nil` when MainOnce
  /// cannot read it. (An address, not a pointer, so that the constant is `Sendable`.)
  private static let verifiedMainQueueAddress: UInt? = verifyLayout().map {
    UInt(bitPattern: $0)
  }

  private static var verifiedMainQueue: UnsafeRawPointer? {
    verifiedMainQueueAddress.flatMap { UnsafeRawPointer(bitPattern: $0) }
  }

  /// Whether queue ownership can be read on this system.
  static var isAvailable: Bool { verifiedMainQueueAddress != nil }

  /// The owner of the main queue.
  static func ownerOfMainQueue() -> Owner {
    guard let queue = verifiedMainQueue else { return .unknown }
    return owner(atQueue: queue)
  }

  /// The owner of `queue`, if it is a serial queue whose state MainOnce can read.
  static func owner(of queue: DispatchQueue) -> Owner {
    guard isAvailable, let pointer = verifiedPointer(to: queue), isSerial(pointer) else {
      return .unknown
    }
    return owner(atQueue: pointer)
  }

  /// Whether `queue` is the main queue. (`DispatchQueue.main` makes a new wrapper object on
  /// every access, so identity comparison does not work.)
  static func isMainQueue(_ queue: DispatchQueue) -> Bool {
    if let main = verifiedMainQueue { return verifiedPointer(to: queue) == main }
    return queue.label == DispatchQueue.main.label
  }

  /// Whether `queue` is known to be concurrent (its width is more than one).
  static func isKnownConcurrent(_ queue: DispatchQueue) -> Bool {
    guard isAvailable, let pointer = verifiedPointer(to: queue) else { return false }
    return !isSerial(pointer)
  }

  private static func owner(atQueue queue: UnsafeRawPointer) -> Owner {
    // This is safe because libdispatch updates `dq_state` only with 64-bit atomic operations on
    // an aligned word; `Atomic<UInt64>` has the same size and alignment as `UInt64`.
    let state = (queue + stateOffset).assumingMemoryBound(to: Atomic<UInt64>.self).pointee
      .load(ordering: .relaxed)
    let owner = Int32(truncatingIfNeeded: state & ownerMask)
    return owner == 0 ? .nobody : .thread(ThreadID(rawValue: owner))
  }

  private static func isSerial(_ queue: UnsafeRawPointer) -> Bool {
    queue.load(fromByteOffset: widthOffset, as: UInt16.self) == 1
  }

  /// The C queue inside a Swift `DispatchQueue`, if its label matches where MainOnce expects it.
  private static func verifiedPointer(to queue: DispatchQueue) -> UnsafeRawPointer? {
    let object = UnsafeRawPointer(Unmanaged.passUnretained(queue).toOpaque())
    guard let pointer = object.load(fromByteOffset: wrappedQueueOffset, as: UnsafeRawPointer?.self),
      label(at: pointer) == queue.label
    else { return nil }
    return pointer
  }

  private static func label(at queue: UnsafeRawPointer) -> String {
    queue.load(fromByteOffset: labelOffset, as: UnsafePointer<CChar>?.self)
      .map { String(cString: $0) } ?? ""
  }

  private static func verifyLayout() -> UnsafeRawPointer? {
    #if _pointerBitWidth(_64) && os(Linux)
      if let setting = Platform.environment("MAINONCE_QUEUE_INTROSPECTION"),
        ["off", "0", "no"].contains(setting.lowercased())
      {
        return nil
      }
      // Check the Swift wrapper's address before reading through it.
      let mainObject = UnsafeRawPointer(Unmanaged.passUnretained(DispatchQueue.main).toOpaque())
      guard let main = Platform.symbol(named: "_dispatch_main_q"),
        mainObject.load(fromByteOffset: wrappedQueueOffset, as: UnsafeRawPointer?.self) == main,
        main.load(fromByteOffset: serialNumberOffset, as: UInt64.self) == 1,
        isSerial(main),
        label(at: main) == DispatchQueue.main.label
      else { return nil }
      return main
    #else
      return nil
    #endif
  }
}
