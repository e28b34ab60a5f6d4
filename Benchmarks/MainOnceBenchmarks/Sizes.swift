import Dispatch
import Foundation
import MainOnce
import Synchronization

/// `MainOnceBenchmarks sizes`: what a once-cell costs where it is declared, with other once
/// primitives beside it.
enum Sizes {
  struct Row: Codable {
    let name: String
    let size: Int
    let stride: Int
    let alignment: Int
  }

  static func measure() -> [Row] {
    [
      row("MainOnceToken", MainOnceToken.self),
      row("MainLazy<Int, Never>", MainLazy<Int, Never>.self),
      row("MainLazy<Int, any Error>", MainLazy<Int, any Error>.self),
      row("dispatch_once_t (Int)", Int.self),
      row("pthread_once_t", pthread_once_t.self),
      row("Atomic<Int>", Atomic<Int>.self),
      row("Mutex<Bool>", Mutex<Bool>.self),
    ]
  }

  private static func row<T: ~Copyable>(_ name: String, _ type: T.Type) -> Row {
    Row(
      name: name, size: MemoryLayout<T>.size, stride: MemoryLayout<T>.stride,
      alignment: MemoryLayout<T>.alignment)
  }
}
