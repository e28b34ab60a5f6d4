internal import Dispatch

/// What "main" means on Linux: holding the main queue.
///
/// MainOnce runs initializers in *main context*: the calling code holds the main dispatch queue,
/// so no other main-queue block and no other `@MainActor` job runs until it returns. That is
/// true
///
/// - in a block submitted to `DispatchQueue.main`, and in `@MainActor` code (on Linux the main
///   actor's executor is the main queue);
/// - on the main thread before `dispatchMain()` is called: the main queue is bound to that
///   thread, which includes top-level code and everything run from `RunLoop.main.run()`;
/// - inside `someQueue.sync { }` entered from any of the above: the thread still holds the main
///   queue while it waits.
///
/// It is *not* the same as running on the main thread. After `dispatchMain()`, in an `async`
/// `main` after its first suspension, and under `swift test`, main-queue blocks run on
/// libdispatch worker threads, where `Thread.isMainThread` is `false`.
///
/// MainOnce answers the question the way `dispatch_assert_queue` does, from the main queue's
/// lock word, without trapping. Where that word cannot be read (a libdispatch whose layout
/// MainOnce does not recognize), it falls back to `DispatchQueue.getSpecific`, the main thread
/// and its own initializers; that fallback cannot see a `sync` nested in a main-queue block, so
/// MainOnce then hops with `async` and lets a stall report explain a hop that never starts.
public enum MainContext {
  /// Whether the calling code holds the main queue.
  ///
  /// Unlike `dispatchPrecondition(condition: .onQueue(.main))` and
  /// `MainActor.assumeIsolated(_:)`, this never traps. It costs a thread-local lookup and a load
  /// (far less than `Thread.isMainThread`; Benchmarks/README.md), or a
  /// `DispatchQueue.getSpecific` call on the fallback path.
  public static var isCurrent: Bool {
    isCurrent(on: ThreadRecord.current)
  }

  /// Whether the main queue's owner can be read, so that ``isCurrent`` is exact in every context,
  /// including a `sync` nested in a main-queue block.
  public static var isExact: Bool { QueueOwnership.isAvailable }

  static func isCurrent(on thread: ThreadRecord) -> Bool {
    switch QueueOwnership.ownerOfMainQueue() {
    case .thread(let owner): return owner == thread.id
    case .nobody: return false
    case .unknown:
      return thread.mainContextDepth > 0 || thread.isMainThread
        || DispatchQueue.getSpecific(key: mainQueueKey) != nil
    }
  }

  /// Set on the main queue the first time it is read, for the fallback path.
  private static var mainQueueKey: DispatchSpecificKey<Bool> { mainQueueKeyBox.key }
  private static let mainQueueKeyBox: MainQueueKey = {
    let key = DispatchSpecificKey<Bool>()
    DispatchQueue.main.setSpecific(key: key, value: true)
    return MainQueueKey(key: key)
  }()
}

/// The main queue's key, in a `Sendable` box: Swift 6.0's Dispatch does not mark
/// `DispatchSpecificKey` `Sendable` (later ones do).
private struct MainQueueKey {
  let key: DispatchSpecificKey<Bool>
}

// This is safe because a `DispatchSpecificKey` has no state of its own after `init`: libdispatch
// uses only its address, as the key, and the box never changes the reference it holds.
extension MainQueueKey: @unchecked Sendable {}
