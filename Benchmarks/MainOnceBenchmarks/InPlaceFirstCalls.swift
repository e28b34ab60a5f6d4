import CBenchmarkSupport
import Foundation
import MainOnce

/// `MainOnceBenchmarks in-place`: the first call of a fresh cell in main context, where MainOnce
/// runs the initializer right there, side by side with `dispatch_once_f`'s first call of a fresh
/// predicate, which is the least a once can cost.
///
/// The method: every round times `cellsPerRound` fresh cells, one call each, for every variant,
/// from the benchmark's main actor (main context: the main queue, under `dispatchMain()`); the
/// variants take turns at going first. The verdict is the median of the per-round ratios over
/// `dispatch_once_f`. Allocations are counted on the calling thread over one more pass, after
/// the warm-up. Instructions per first call are counted by valgrind's callgrind, on the main
/// thread before `dispatchMain()` (main context too: the main queue is bound to it), since
/// valgrind crashes after `dispatchMain()`: see ``instructionsPerCall(_:_:calls:)``.
enum InPlaceFirstCalls {
  struct Result: Codable {
    let cellsPerRound: Int
    let rounds: Int
    /// Nanoseconds per first call, one sample per round, for each variant by key.
    let timings: [String: Timing]
    /// Heap allocations per first call on the calling thread, for each variant by key.
    let allocations: [String: Double]
    /// Instructions per first call under callgrind, for each variant by key; `nil` where
    /// valgrind could not run.
    var instructions: [String: Double]?
    /// The first calls counted under callgrind: this many and twice as many.
    var instructionCalls: Int?
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
      let lazies = FreshLazies(count)
      return { index in _ = lazies.base[index].value }
    },
  ]

  /// Fresh lazy values on the heap, as ``FreshTokens`` holds tokens: read through the buffer,
  /// a read retains and releases nothing of the benchmark's (an array of objects each holding
  /// one cost a retain and a release of the object a read, two atomic operations).
  final class FreshLazies: Sendable {
    // This is safe because the lazy values are initialized before the buffer is shared and
    // only read through MainOnce afterwards.
    nonisolated(unsafe) let base: UnsafeMutablePointer<MainLazy<Int, Never>>
    private let count: Int

    init(_ count: Int) {
      self.count = count
      base = .allocate(capacity: count)
      for index in 0..<count { (base + index).initialize(to: MainLazy { 1 }) }
    }

    deinit {
      base.deinitialize(count: count)
      base.deallocate()
    }
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
    var result = Result(
      cellsPerRound: count, rounds: rounds, timings: samples.mapValues { Timing($0) },
      allocations: allocations)
    if let binary = InstructionCounts.strippedCopy() {
      let calls = quick ? 2_000 : 20_000
      var instructions = [String: Double]()
      for variant in variants {
        instructions[variant.key] = instructionsPerCall(binary, variant.key, calls: calls)
      }
      try? FileManager.default.removeItem(atPath: binary)
      (result.instructions, result.instructionCalls) = (instructions, calls)
    }
    return result
  }

  /// Instructions per first call of the variant `key` under callgrind, in `binary` (a stripped
  /// copy): two runs of ``runLoop(key:calls:cells:)`` that prepare the same `2 × calls` fresh
  /// cells and make `calls` and `2 × calls` first calls; the difference over `calls`. What the
  /// process does once (its start, MainOnce's first use, preparing the cells) cancels out.
  static func instructionsPerCall(_ binary: String, _ key: String, calls: Int) -> Double? {
    let arguments = { (made: Int) in ["in-place-loop", key, "\(made)", "\(2 * calls)"] }
    guard let once = InstructionCounts.collected(binary, arguments(calls)),
      let twice = InstructionCounts.collected(binary, arguments(2 * calls))
    else { return nil }
    return Double(twice - once) / Double(calls)
  }

  /// The child side of ``instructionsPerCall(_:_:calls:)``
  /// (`MainOnceBenchmarks in-place-loop KEY CALLS CELLS`): on the main thread, before
  /// `dispatchMain()`, prepares `cells` fresh cells of the variant `key`, makes the first call of
  /// `calls` of them, and exits with every cell alive, so that no cell's end is counted.
  @MainActor
  static func runLoop(key: String, calls: Int, cells: Int) -> Never {
    guard let variant = variants.first(where: { $0.key == key }), calls <= cells else {
      FileHandle.standardError.write(Data("unknown in-place variant \(key)\n".utf8))
      exit(64)
    }
    precondition(MainContext.isCurrent, "in-place first calls are counted in main context")
    let call = variant.start(cells)
    for index in 0..<calls { call(index) }
    withExtendedLifetime(call) { exit(0) }
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
