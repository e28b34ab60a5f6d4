import Dispatch
import Foundation

/// Monotonic nanoseconds.
func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

/// Per-call timings in nanoseconds, one sample per round in round order, with their best and
/// median.
struct Timing: Codable {
  let best: Double
  let median: Double
  let samples: [Double]

  init(_ samples: [Double]) {
    let sorted = samples.sorted()
    best = sorted.first ?? .nan
    median = sorted.isEmpty ? .nan : sorted[sorted.count / 2]
    self.samples = samples
  }
}

/// Two timings taken in the same rounds, combined round by round: one value per round, of
/// samples taken back to back, so that whatever slowed a round down slowed both. Its quartiles
/// show the noise.
struct Paired {
  let lowerQuartile: Double
  let median: Double
  let upperQuartile: Double
  /// How `short` writes a value: `×` and two decimals for a ratio, whole nanoseconds for a
  /// difference.
  private let unit: String
  private let decimals: Int

  private init(
    _ timing: Timing, _ baseline: Timing, unit: String, decimals: Int,
    combine: (Double, Double) -> Double
  ) {
    (lowerQuartile, median, upperQuartile) = quartiles(
      zip(timing.samples, baseline.samples).map(combine))
    self.unit = unit
    self.decimals = decimals
  }

  /// The ratio of `timing` to `baseline`, round by round.
  static func ratio(_ timing: Timing, over baseline: Timing) -> Paired {
    Paired(timing, baseline, unit: "×", decimals: 2, combine: /)
  }

  /// What `timing` adds to `baseline`, round by round. Unlike a ratio, it does not shrink when
  /// the machine is busy and the baseline slows down.
  static func difference(_ timing: Timing, over baseline: Timing) -> Paired {
    Paired(timing, baseline, unit: "", decimals: 0, combine: -)
  }

  /// How the median compares with `target`: met if within it, missed if even the lower
  /// quartile is over it; otherwise the rounds disagree, and it is within the noise.
  func verdict(against target: Double) -> BenchmarkRun.Verdict {
    if median <= target { return .met }
    return lowerQuartile > target ? .missed : .withinNoise
  }

  /// The median with its quartiles, for a verdict.
  var description: String {
    "\(format(median) + unit) (median of per-round ratios; quartiles \(quartileRange))"
  }

  /// The median and, in parentheses, the quartiles, for a table.
  var short: String { "\(format(median) + unit) (\(quartileRange))" }

  private var quartileRange: String { "\(format(lowerQuartile))–\(format(upperQuartile))" }

  private func format(_ value: Double) -> String { Report.format(value, decimals: decimals) }
}

/// The lower quartile, the median and the upper quartile of `values`.
func quartiles(_ values: [Double]) -> (Double, Double, Double) {
  let sorted = values.sorted()
  func quantile(_ fraction: Double) -> Double {
    sorted.isEmpty ? .nan : sorted[Int((Double(sorted.count - 1) * fraction).rounded())]
  }
  return (quantile(0.25), quantile(0.5), quantile(0.75))
}

/// A thread that runs work handed to it, so that measurements "from another thread" always run
/// on the same plain thread, never on the main queue.
final class WorkerThread: @unchecked Sendable {
  // This is safe because `work` is written before `start` is signalled and read by the worker
  // after waiting for it; `finished` orders the worker's writes before the caller's reads.
  private var work: (() -> Void)?
  private let start = DispatchSemaphore(value: 0)
  private let finished = DispatchSemaphore(value: 0)

  init() {
    Thread {
      while true {
        self.start.wait()
        self.work?()
        self.finished.signal()
      }
    }.start()
  }

  /// Runs `body` on the worker and returns its result, without blocking the caller's thread.
  func run<Result: Sendable>(_ body: @escaping @Sendable () -> Result) async -> Result {
    await withCheckedContinuation { continuation in
      DispatchQueue.global().async {
        let box = ResultBox<Result>()
        self.work = { box.value = body() }
        self.start.signal()
        self.finished.wait()
        continuation.resume(returning: box.value!)
      }
    }
  }
}

private final class ResultBox<Value>: @unchecked Sendable {
  // This is safe because `value` is written by the worker before `finished` is signalled and
  // read after waiting for it.
  var value: Value?
}

/// Measures loops in interleaved rounds: every candidate is calibrated to take about
/// `sampleNanoseconds` per sample, then each round takes one sample of each, in turn.
struct Rounds {
  let rounds: Int
  let sampleNanoseconds: UInt64

  func iterations(
    isolation: isolated (any Actor)? = #isolation, for loop: (Int) async -> Int
  ) async -> Int {
    var iterations = 1_000
    while true {
      let start = now()
      _ = await loop(iterations)
      let elapsed = now() - start
      if elapsed >= sampleNanoseconds || iterations >= 1 << 30 { return iterations }
      iterations *= elapsed > sampleNanoseconds / 8 ? 2 : 8
    }
  }

  static func sample(
    isolation: isolated (any Actor)? = #isolation, _ loop: (Int) async -> Int, iterations: Int
  ) async -> Double {
    let start = now()
    let checksum = await loop(iterations)
    let elapsed = now() - start
    if checksum == Int.min { print("") }  // keep the checksum alive
    return Double(elapsed) / Double(iterations)
  }
}
