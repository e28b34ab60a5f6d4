import CBenchmarkSupport
import Dispatch
import Foundation

/// Fast-path timings in the main queue's context and on another thread, allocations per call,
/// and throughput with one and two threads.
struct FastPathSuite {
  struct Row: Codable {
    let name: String
    let isMainOnce: Bool
    let mainQueue: Timing?
    let otherThread: Timing?
    let allocationsPerCall: Double?
  }

  struct Scaling: Codable {
    let name: String
    let oneThreadCallsPerMicrosecond: Double
    let twoThreadsCallsPerMicrosecond: Double
    var factor: Double { twoThreadsCallsPerMicrosecond / oneThreadCallsPerMicrosecond }
  }

  let rounds: Rounds
  let worker = WorkerThread()
  let secondWorker = WorkerThread()

  @MainActor
  func run() async throws -> (rows: [Row], scaling: [Scaling]) {
    try await FastPaths.prepare(using: worker)
    let candidates = Candidate.all
    var mainIterations: [Int?] = []
    var otherIterations: [Int?] = []
    for candidate in candidates {
      if let loop = candidate.onMainQueue {
        mainIterations.append(await rounds.iterations(for: { await loop($0) }))
      } else {
        mainIterations.append(nil)
      }
      if let loop = candidate.onOtherThread {
        otherIterations.append(await rounds.iterations(for: { await run(loop, $0) }))
      } else {
        otherIterations.append(nil)
      }
    }
    var mainSamples = Array(repeating: [Double](), count: candidates.count)
    var otherSamples = Array(repeating: [Double](), count: candidates.count)
    for round in 0..<rounds.rounds {
      // Interleave: every round visits every candidate, starting at a different one.
      for offset in candidates.indices {
        let index = (round + offset) % candidates.count
        let candidate = candidates[index]
        if let loop = candidate.onMainQueue, let iterations = mainIterations[index] {
          mainSamples[index].append(await Rounds.sample({ await loop($0) }, iterations: iterations))
        }
        if let loop = candidate.onOtherThread, let iterations = otherIterations[index] {
          otherSamples[index].append(
            await Rounds.sample({ await run(loop, $0) }, iterations: iterations))
        }
      }
    }
    var rows: [Row] = []
    for (index, candidate) in candidates.enumerated() {
      rows.append(
        Row(
          name: candidate.name, isMainOnce: candidate.isMainOnce,
          mainQueue: mainSamples[index].isEmpty ? nil : Timing(mainSamples[index]),
          otherThread: otherSamples[index].isEmpty ? nil : Timing(otherSamples[index]),
          allocationsPerCall: candidate.isMainOnce ? await allocations(candidate) : nil))
    }
    var scaling: [Scaling] = []
    for candidate in candidates
    where ["onceOnMain(token:)", "MainLazy.value", Candidate.baselineName].contains(candidate.name)
    {
      guard case .blocking(let loop) = candidate.onOtherThread else { continue }
      scaling.append(await self.scaling(candidate.name, loop))
    }
    return (rows, scaling)
  }

  /// Runs a loop on the worker thread, or in a task, and returns its checksum.
  private func run(_ loop: Candidate.Loop, _ iterations: Int) async -> Int {
    switch loop {
    case .blocking(let loop): await worker.run { loop(iterations) }
    case .suspending(let loop): await Task.detached { await loop(iterations) }.value
    }
  }

  /// Heap allocations per call, counted on the thread that makes the calls.
  private func allocations(_ candidate: Candidate) async -> Double? {
    let iterations = 100_000
    switch candidate.onOtherThread {
    case .blocking(let loop):
      let count = await worker.run {
        bench_allocations_begin()
        _ = loop(iterations)
        return bench_allocations_end()
      }
      return Double(count) / Double(iterations)
    case .suspending(let loop):
      let count = await Task.detached {
        bench_allocations_begin()
        _ = await loop(iterations)
        return bench_allocations_end()
      }.value
      return Double(count) / Double(iterations)
    case nil:
      return nil
    }
  }

  /// Calls per microsecond with one thread, and with two threads at once.
  private func scaling(_ name: String, _ loop: @escaping @Sendable (Int) -> Int) async -> Scaling {
    let iterations = await rounds.iterations(for: { iterations in
      await worker.run { loop(iterations) }
    })
    var one: [Double] = []
    var two: [Double] = []
    for _ in 0..<rounds.rounds {
      let start = now()
      _ = await worker.run { loop(iterations) }
      one.append(Double(iterations) / (Double(now() - start) / 1_000))
      let pairStart = now()
      async let first = worker.run { loop(iterations) }
      async let second = secondWorker.run { loop(iterations) }
      _ = await (first, second)
      two.append(Double(2 * iterations) / (Double(now() - pairStart) / 1_000))
    }
    return Scaling(
      name: name, oneThreadCallsPerMicrosecond: one.max() ?? .nan,
      twoThreadsCallsPerMicrosecond: two.max() ?? .nan)
  }
}
