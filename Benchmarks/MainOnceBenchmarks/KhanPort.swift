import CBenchmarkSupport
import Dispatch
import Foundation
import Synchronization

/// A literal Swift port of Khan Academy's `dispatch_once_on_main_thread`: ask
/// `Thread.isMainThread` first; on the main thread `dispatch_once`; elsewhere, while the
/// predicate is still zero, `dispatch_sync` to the main queue and `dispatch_once` there.
///
/// On Linux it traps when called from a main-queue block after `dispatchMain()` (the benchmark
/// never does that); here it is the baseline for cost, not for correctness.
enum KhanPort {
  /// How many `DispatchQueue.main.sync` calls the port has made.
  static let mainQueueSyncs = Atomic(0)

  static func onceOnMainThread(
    _ predicate: UnsafeMutablePointer<Int>, _ block: @Sendable () -> Void
  ) {
    if Thread.isMainThread {
      once(predicate, block)
    } else if predicate.pointee == 0 {
      mainQueueSyncs.add(1, ordering: .relaxed)
      let shared = SharedPredicate(pointer: predicate)
      DispatchQueue.main.sync { once(shared.pointer, block) }
    }
  }

  private static func once(_ predicate: UnsafeMutablePointer<Int>, _ block: () -> Void) {
    withoutActuallyEscaping(block) { block in
      let box = Unmanaged.passRetained(BlockBox(block))
      bench_dispatch_once(predicate, box.toOpaque()) { context in
        Unmanaged<BlockBox>.fromOpaque(context!).takeUnretainedValue().block()
      }
      box.release()
    }
  }

  private final class BlockBox {
    let block: () -> Void
    init(_ block: @escaping () -> Void) { self.block = block }
  }
}

/// The predicate's address, to hand to the main queue. A box, not `nonisolated(unsafe) let`:
/// Swift 6.0 still reports sending that pointer as a risk of data races.
private struct SharedPredicate {
  let pointer: UnsafeMutablePointer<Int>
}

// This is safe because `dispatch_once_f` alone writes through the predicate, and synchronizes
// those writes.
extension SharedPredicate: @unchecked Sendable {}
