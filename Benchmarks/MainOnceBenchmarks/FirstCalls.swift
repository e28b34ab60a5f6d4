import CBenchmarkSupport
import Dispatch
import Foundation
import MainOnce

/// `MainOnceBenchmarks first-call`: the first call of a fresh token from one background thread,
/// side by side with the hop it makes, under each driver (each in a process of its own, see
/// ``DriverProcess``).
///
/// The method: every round times `tokensPerRound` fresh tokens, one call each, and
/// also a bare `DispatchQueue.main.async { semaphore.signal() }; semaphore.wait()` as many
/// times, from the same thread; the variants take turns at going first. The verdict is the
/// median of the per-round ratios (each round's first calls over the same round's bare hops),
/// and beside it the median per-round difference: what MainOnce adds to a hop, in nanoseconds.
/// A ratio alone depends on how long the hop takes, which depends on how busy the machine is;
/// the difference does much less.
enum FirstCalls {
  struct Result: Codable {
    let driver: String
    /// Whether every thread of the process ran on one CPU (`--one-cpu`): then no hop waits for
    /// another CPU to wake up, and what is left is the work of both sides.
    let oneCPU: Bool
    let tokensPerRound: Int
    /// Rounds measured, after one warm-up round that is not.
    let rounds: Int
    /// Nanoseconds per call, one sample per round, for each variant by key.
    let timings: [String: Timing]
    /// Heap allocations per call, on the calling thread and in the whole process.
    let allocations: [String: Allocations]
    /// Main-queue work items MainOnce sent per first call: `dispatch_async_f` calls that target
    /// the main queue, counted by interposing it (`bench_main_queue_work_items`).
    let workItemsPerCall: Double
  }

  struct Allocations: Codable {
    let callingThread: Double
    let process: Double
  }

  /// One way to make a first call. `start` prepares `count` fresh cells (untimed) and returns
  /// the call that uses the cell at an index.
  struct Variant: Sendable {
    let key: String
    let name: String
    let start: @Sendable (_ count: Int) -> @Sendable (Int) -> Void
  }

  /// The baseline of the verdict.
  static let bareHop = "bareHop"

  static let variants: [Variant] = [
    Variant(key: "bareSync", name: "DispatchQueue.main.sync {} (bare)") { _ in
      { _ in DispatchQueue.main.sync {} }
    },
    Variant(key: bareHop, name: "main.async { sem.signal() }; sem.wait() (bare hop)") { _ in
      let semaphore = DispatchSemaphore(value: 0)
      return { _ in
        DispatchQueue.main.async { semaphore.signal() }
        semaphore.wait()
      }
    },
    Variant(key: "onceOnMain", name: "onceOnMain(token:)") { count in
      let tokens = FreshTokens(count)
      return { index in onceOnMain(token: tokens.base[index]) {} }
    },
    Variant(key: "khanPort", name: "Khan port (main.sync)") { count in
      let predicates = FreshPredicates(count)
      return { index in KhanPort.onceOnMainThread(predicates.base + index) {} }
    },
  ]

  /// The child side: measures under the driver this process serves the main queue with.
  static func measure(driver: String, quick: Bool, oneCPU: Bool) -> Result {
    let count = quick ? 200 : 2_000
    let rounds = quick ? 3 : 9
    // Warm up: threads of the dispatch pool, the allocator's caches, MainOnce's thread record.
    for variant in variants { run(variant, count: quick ? 20 : 200) }
    var samples = [String: [Double]]()
    for round in 0..<rounds {
      // Rotate the order, so that no variant always runs first or right after another.
      for offset in variants.indices {
        let variant = variants[(round + offset) % variants.count]
        samples[variant.key, default: []].append(run(variant, count: count))
      }
    }
    var allocations = [String: Allocations]()
    for variant in variants {
      let call = variant.start(count)
      bench_allocations_begin()
      bench_process_allocations_begin()
      for index in 0..<count { call(index) }
      let everywhere = bench_process_allocations_end()
      let here = bench_allocations_end()
      allocations[variant.key] = Allocations(
        callingThread: Double(here) / Double(count), process: Double(everywhere) / Double(count))
    }
    let once = variants.first { $0.key == "onceOnMain" }!
    let itemsBefore = bench_main_queue_work_items()
    run(once, count: count)
    let items = bench_main_queue_work_items() - itemsBefore
    return Result(
      driver: driver, oneCPU: oneCPU, tokensPerRound: count, rounds: rounds,
      timings: samples.mapValues { Timing($0) }, allocations: allocations,
      workItemsPerCall: Double(items) / Double(count))
  }

  /// Nanoseconds per call of `count` fresh cells.
  @discardableResult
  static func run(_ variant: Variant, count: Int) -> Double {
    let call = variant.start(count)
    let start = now()
    for index in 0..<count { call(index) }
    return Double(now() - start) / Double(count)
  }
}
