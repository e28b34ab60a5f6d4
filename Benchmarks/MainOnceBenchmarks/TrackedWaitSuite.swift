import CBenchmarkSupport
import Dispatch
import Foundation
import MainOnce

/// `MainOnceBenchmarks tracked-waits`: tracked waits that do not block, side by side with the
/// plain calls they stand for.
///
/// On a plain thread, in interleaved rounds, ns per call of each pair: a signalled semaphore's
/// `wait()` and `wait(for:)`, each after the `signal()` that makes it return at once (both loops
/// signal, so that the only difference is the wait); an empty group's `wait()` and `wait(for:)`;
/// `sync {}` and `trackedSync {}` on an idle serial queue; and `withTrackedWait(for:)` around the
/// same signalled semaphore's `wait()`. Heap allocations per call after a warm-up; instructions
/// per call under callgrind (see ``InstructionCounts``); and calls per µs with 1, 2 and 16
/// threads at once, each on a semaphore of its own, over one thread's.
struct TrackedWaitSuite {
  /// What one thread waits on: its own semaphore, group and queue, and a target.
  final class Waitables: Sendable {
    let semaphore = DispatchSemaphore(value: 0)
    let group = DispatchGroup()
    let queue = DispatchQueue(label: "MainOnceBenchmarks.idle")
    // A short name is stored in the target itself: copying the target retains nothing.
    let target = WaitTarget.work("benchmark")
  }

  /// One call of each form, behind a function the optimizer may not inline (see ``FastPaths``).
  enum Probes {
    @inline(never) static func semaphoreWait(_ waitables: Waitables) -> Int {
      waitables.semaphore.signal()
      waitables.semaphore.wait()
      return 1
    }

    @inline(never) static func semaphoreWaitFor(_ waitables: Waitables) -> Int {
      waitables.semaphore.signal()
      waitables.semaphore.wait(for: waitables.target)
      return 1
    }

    @inline(never) static func groupWait(_ waitables: Waitables) -> Int {
      waitables.group.wait()
      return 1
    }

    @inline(never) static func groupWaitFor(_ waitables: Waitables) -> Int {
      waitables.group.wait(for: waitables.target)
      return 1
    }

    @inline(never) static func sync(_ waitables: Waitables) -> Int {
      waitables.queue.sync {}
      return 1
    }

    @inline(never) static func trackedSync(_ waitables: Waitables) -> Int {
      waitables.queue.trackedSync {}
      return 1
    }

    @inline(never) static func withTrackedWait(_ waitables: Waitables) -> Int {
      waitables.semaphore.signal()
      MainOnce.withTrackedWait(for: waitables.target) { waitables.semaphore.wait() }
      return 1
    }
  }

  struct Form: Sendable {
    let name: String
    let probe: @Sendable (Waitables) -> Int

    func loop(_ iterations: Int, _ waitables: Waitables) -> Int {
      repeatProbe(iterations) { probe(waitables) }
    }
  }

  static let semaphoreWait = Form(name: "signal(); semaphore.wait()", probe: Probes.semaphoreWait)
  static let semaphoreWaitFor = Form(
    name: "signal(); semaphore.wait(for:)", probe: Probes.semaphoreWaitFor)
  static let withTrackedWait = Form(
    name: "signal(); withTrackedWait(for:) { semaphore.wait() }", probe: Probes.withTrackedWait)
  static let forms = [
    semaphoreWait, semaphoreWaitFor,
    Form(name: "group.wait(), empty group", probe: Probes.groupWait),
    Form(name: "group.wait(for:), empty group", probe: Probes.groupWaitFor),
    Form(name: "queue.sync {}, idle serial queue", probe: Probes.sync),
    Form(name: "queue.trackedSync {}, idle serial queue", probe: Probes.trackedSync),
    withTrackedWait,
  ]

  /// A tracked form judged against its plain one: at most `ratio` times its time, or, where
  /// `instructions` is given and the plain call takes under 5 ns, at most that many more
  /// instructions a call.
  struct Pair {
    let tracked: String
    let plain: String
    let ratio: Double
    let instructions: Double?
  }

  static let pairs = [
    Pair(tracked: forms[1].name, plain: forms[0].name, ratio: 1.3, instructions: 10),
    Pair(tracked: forms[3].name, plain: forms[2].name, ratio: 1.3, instructions: 10),
    Pair(tracked: forms[5].name, plain: forms[4].name, ratio: 1.5, instructions: nil),
    Pair(tracked: forms[6].name, plain: forms[0].name, ratio: 2, instructions: nil),
  ]

  /// The forms run at once on several threads, and how many threads.
  static let scalingForms = [semaphoreWait, semaphoreWaitFor, withTrackedWait]
  static let threadCounts = [1, 2, 16]

  /// For `MainOnceBenchmarks loop`: each form on waitables of its own.
  static let instructionLoops: [(name: String, loop: @Sendable (Int) -> Int)] = forms.map {
    form in (form.name, { form.loop($0, Waitables()) })
  }

  struct Row: Codable {
    let name: String
    /// ns per call.
    let timing: Timing
    let allocationsPerCall: Double
    /// Instructions per call under callgrind; `nil` if it could not run.
    var instructionsPerCall: Double?
  }

  struct Scaling: Codable {
    let name: String
    let threads: Int
    /// Calls per µs, all threads together, one sample per round.
    let callsPerMicrosecond: Timing
  }

  struct Result: Codable {
    let rows: [Row]
    let scaling: [Scaling]
    /// The calls counted under callgrind: this many and twice as many.
    let instructionIterations: Int
  }

  let rounds: Rounds
  let quick: Bool
  let worker = WorkerThread()

  @MainActor
  func run() async -> Result {
    let waitables = Waitables()
    let forms = Self.forms
    // Warm up: the thread's record and its spare tracked wait are made by its first tracked
    // wait.
    for form in forms { _ = await worker.run { form.loop(1_000, waitables) } }
    var iterations: [Int] = []
    for form in forms {
      iterations.append(
        await rounds.iterations(for: { count in await worker.run { form.loop(count, waitables) } }))
    }
    var samples = Array(repeating: [Double](), count: forms.count)
    for round in 0..<rounds.rounds {
      for offset in forms.indices {
        let index = (round + offset) % forms.count
        let form = forms[index]
        samples[index].append(
          await Rounds.sample(
            { count in await worker.run { form.loop(count, waitables) } },
            iterations: iterations[index]))
      }
    }
    var rows: [Row] = []
    for (index, form) in forms.enumerated() {
      let calls = 100_000
      let allocations = await worker.run {
        bench_allocations_begin()
        _ = form.loop(calls, waitables)
        return bench_allocations_end()
      }
      rows.append(
        Row(
          name: form.name, timing: Timing(samples[index]),
          allocationsPerCall: Double(allocations) / Double(calls)))
    }
    let scaling = await self.scaling()
    let instructionIterations = quick ? 20_000 : 200_000
    if let binary = InstructionCounts.strippedCopy() {
      for index in rows.indices {
        rows[index].instructionsPerCall = InstructionCounts.perCall(
          binary, rows[index].name, iterations: instructionIterations)
      }
      try? FileManager.default.removeItem(atPath: binary)
    }
    return Result(rows: rows, scaling: scaling, instructionIterations: instructionIterations)
  }

  /// Calls per µs of each scaling form with each thread count, in interleaved rounds. Every
  /// thread count makes the same number of calls in all: one thread's calibrated count for one
  /// thread, twice it for more, split between them.
  private func scaling() async -> [Scaling] {
    let forms = Self.scalingForms
    let counts = Self.threadCounts
    let gang = ThreadGang(count: counts.max()!)
    let warmUp = { @Sendable (form: Form) in
      _ = gang.run(threads: counts.max()!) { waitables in _ = form.loop(1_000, waitables) }
    }
    var iterations: [Int] = []
    for form in forms {
      await worker.run { warmUp(form) }
      iterations.append(
        await rounds.iterations(for: { count in
          await worker.run {
            _ = gang.run(threads: 1) { _ = form.loop(count, $0) }
            return 0
          }
        }))
    }
    var samples = Array(
      repeating: Array(repeating: [Double](), count: counts.count), count: forms.count)
    for round in 0..<rounds.rounds {
      for offset in forms.indices {
        let index = (round + offset) % forms.count
        let form = forms[index]
        for (countIndex, threads) in counts.enumerated() {
          let total = threads == 1 ? iterations[index] : 2 * iterations[index]
          let each = total / threads
          let elapsed = await worker.run {
            gang.run(threads: threads) { _ = form.loop(each, $0) }
          }
          samples[index][countIndex].append(
            Double(each * threads) / (Double(elapsed) / 1_000))
        }
      }
    }
    var result: [Scaling] = []
    for (index, form) in forms.enumerated() {
      for (countIndex, threads) in counts.enumerated() {
        result.append(
          Scaling(
            name: form.name, threads: threads,
            callsPerMicrosecond: Timing(samples[index][countIndex])))
      }
    }
    return result
  }
}

/// Threads that run one loop at once, each on waitables of its own.
final class ThreadGang: @unchecked Sendable {
  // This is safe because `work` is written before the start semaphores are signalled and read
  // by the threads after waiting for them; `finished` orders their work before the caller's
  // return.
  private var work: (@Sendable (TrackedWaitSuite.Waitables) -> Void)?
  private let starts: [DispatchSemaphore]
  private let finished = DispatchSemaphore(value: 0)

  init(count: Int) {
    starts = (0..<count).map { _ in DispatchSemaphore(value: 0) }
    for start in starts {
      Thread {
        let waitables = TrackedWaitSuite.Waitables()
        while true {
          start.wait()
          self.work?(waitables)
          self.finished.signal()
        }
      }.start()
    }
  }

  /// Runs `body` on the first `threads` threads at once; returns the ns from releasing them to
  /// the last one's return.
  func run(
    threads: Int, _ body: @escaping @Sendable (TrackedWaitSuite.Waitables) -> Void
  ) -> UInt64 {
    work = body
    let start = now()
    for index in 0..<threads { starts[index].signal() }
    for _ in 0..<threads { finished.wait() }
    return now() - start
  }
}
