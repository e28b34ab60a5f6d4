import CBenchmarkSupport
import MainOnce

/// `MainOnceBenchmarks in-place`: the first call of a fresh cell in main context, where MainOnce
/// runs the initializer right there, side by side with `dispatch_once_f`'s first call of a fresh
/// predicate, which is the least a once can cost.
///
/// The method: every round times `cellsPerRound` fresh cells, one call each, for every variant,
/// from the benchmark's main actor (main context: the main queue, under `dispatchMain()`); the
/// variants take turns at going first. The verdict is the median of the per-round ratios over
/// `dispatch_once_f`. Allocations are counted on the calling thread over one more pass, after
/// the warm-up.
enum InPlaceFirstCalls {
  struct Result: Codable {
    let cellsPerRound: Int
    let rounds: Int
    /// Nanoseconds per first call, one sample per round, for each variant by key.
    let timings: [String: Timing]
    /// Heap allocations per first call on the calling thread, for each variant by key.
    let allocations: [String: Double]
  }

  /// One way to make a first call. `start` prepares `count` fresh cells (untimed) and returns
  /// the call that uses the cell at an index.
  struct Variant {
    let key: String
    let name: String
    let start: (_ count: Int) -> (Int) -> Void
  }

  /// The baseline of the verdict.
  static let dispatchOnce = "dispatchOnce"

  @MainActor static let variants: [Variant] = [
    Variant(key: dispatchOnce, name: "dispatch_once_f (C), fresh predicate") { count in
      let predicates = FreshPredicates(count)
      return { index in bench_dispatch_once(predicates.base + index, nil) { _ in } }
    },
    Variant(key: "onceOnMain", name: "onceOnMain(token:), fresh token") { count in
      let tokens = FreshTokens(count)
      return { index in onceOnMain(token: tokens.base[index]) {} }
    },
    Variant(key: "mainLazy", name: "MainLazy<Int, Never>.value, fresh lazy value") { count in
      let lazies = (0..<count).map { _ in LazyBox() }
      return { index in _ = lazies[index].lazy.value }
    },
  ]

  /// A fresh lazy value, in an object of its own.
  final class LazyBox {
    let lazy = MainLazy { 1 }
  }

  @MainActor
  static func measure(quick: Bool) -> Result {
    precondition(MainContext.isCurrent, "in-place first calls are measured in main context")
    let count = quick ? 1_000 : 20_000
    let rounds = quick ? 3 : 11
    // Warm up: the allocator's caches, MainOnce's thread record.
    for variant in variants { run(variant, count: quick ? 100 : 2_000) }
    var samples = [String: [Double]]()
    for round in 0..<rounds {
      // Rotate the order, so that no variant always runs first or right after another.
      for offset in variants.indices {
        let variant = variants[(round + offset) % variants.count]
        samples[variant.key, default: []].append(run(variant, count: count))
      }
    }
    var allocations = [String: Double]()
    for variant in variants {
      let call = variant.start(count)
      bench_allocations_begin()
      for index in 0..<count { call(index) }
      allocations[variant.key] = Double(bench_allocations_end()) / Double(count)
    }
    return Result(
      cellsPerRound: count, rounds: rounds, timings: samples.mapValues { Timing($0) },
      allocations: allocations)
  }

  /// Nanoseconds per first call of `count` fresh cells.
  @discardableResult
  @MainActor
  static func run(_ variant: Variant, count: Int) -> Double {
    let call = variant.start(count)
    let start = now()
    for index in 0..<count { call(index) }
    return Double(now() - start) / Double(count)
  }
}
