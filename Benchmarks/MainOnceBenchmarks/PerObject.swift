import CBenchmarkSupport
import Dispatch
import Foundation
import MainOnce
import Synchronization

/// `MainOnceBenchmarks objects`: per-object once on a call site that is done for its object.
///
/// For each form, in interleaved rounds: ns per call on one thread; the same with two threads
/// at once, each on an object of its own (ns per call each, and per round the ratio to the
/// round's one-thread time); heap allocations per call. Beside them, as the reference, a token
/// stored on the object. Then memory: bytes of heap per live object with one call site used,
/// from the heap in use before and after the first call on each of 10,000 live objects.
struct PerObjectSuite {
  struct Row: Codable {
    let name: String
    /// ns per call, one thread.
    let oneThread: Timing
    /// ns per call on each of two threads at once, the mean of the two, per round.
    let twoThreads: Timing
    /// The two threads separately, per round.
    let firstOfTwo: [Double]
    let secondOfTwo: [Double]
    /// Per round, the share of its own loop's time that each of the two threads spent on a CPU
    /// (the lesser of the two, from their CPU clocks). Under 1 when a thread sleeps on a
    /// contended lock, and when the two share one CPU on a busy machine: the reference row,
    /// which takes no lock, tells the two apart.
    let onCPU: [Double]
    /// Per round, the share of the two loops' common span during which both were running.
    let overlap: [Double]
    let allocationsPerCall: Double
  }

  struct Memory: Codable {
    let name: String
    let objects: Int
    /// Heap bytes per object that the first calls left in use.
    let bytesPerObject: Double
    /// Allocations per first call, anywhere in the process (freed ones included).
    let allocationsPerFirstCall: Double
  }

  struct Result: Codable {
    let rows: [Row]
    let memory: [Memory]
  }

  /// Objects that MainOnce keeps per-object state for. A class with nothing else in it.
  final class Subject: Sendable {}

  /// The same with a token stored on it: the reference.
  final class SubjectWithToken: Sendable {
    let token = MainOnceToken("per object")
  }

  /// The forms measured, each through a probe that is one call site. `loop` calls the probe
  /// `count` times for an object and returns a checksum; `firstCalls` makes the first call for
  /// each of a list of objects.
  struct Form: Sendable {
    let name: String
    let loop: @Sendable (_ count: Int, Subject, SubjectWithToken) -> Int
    let firstCalls: (@Sendable ([Subject]) -> Void)?
  }

  static let referenceName = "token stored on the object (reference)"

  static let forms: [Form] = [
    Form(
      name: "runOnce(for:)",
      loop: { count, object, _ in repeatProbe(count) { Probes.runOnce(object) } },
      firstCalls: { objects in for object in objects { _ = Probes.runOnce(object) } }),
    Form(
      name: "onceOnMain(for:)",
      loop: { count, object, _ in repeatProbe(count) { Probes.onceOnMain(object) } },
      firstCalls: { objects in for object in objects { _ = Probes.onceOnMain(object) } }),
    Form(
      name: referenceName,
      loop: { count, _, holder in repeatProbe(count) { Probes.token(holder) } },
      firstCalls: nil),
  ]

  enum Probes {
    @inline(never) static func runOnce(_ object: Subject) -> Int {
      MainOnce.runOnce(for: object) {}
      return 1
    }

    @inline(never) static func onceOnMain(_ object: Subject) -> Int {
      MainOnce.onceOnMain(for: object) {}
      return 1
    }

    @inline(never) static func token(_ object: SubjectWithToken) -> Int {
      MainOnce.onceOnMain(token: object.token) {}
      return 1
    }
  }

  /// Whether the two threads of `row` each had a CPU: on one for at least 90% of their loops,
  /// and running at the same time for at least 90% of their span (medians). Asked of the
  /// reference row, which takes no lock.
  static func ranInParallel(_ row: Row) -> Bool {
    Timing(row.onCPU).median >= 0.9 && Timing(row.overlap).median >= 0.9
  }

  /// The objects whose call sites `MainOnceBenchmarks instructions` counts.
  static let counted = (Subject(), SubjectWithToken())

  /// Loops for `MainOnceBenchmarks instructions`, on ``counted``: those the fast-path list does
  /// not have already.
  static let instructionLoops: [(name: String, loop: @Sendable (Int) -> Int)] = forms.filter {
    $0.name != "onceOnMain(for:)"
  }.map { form in
    (
      form.name == referenceName ? form.name : "\(form.name) (per object)",
      { form.loop($0, counted.0, counted.1) }
    )
  }

  /// Makes every call site done for ``counted``, in main context.
  @MainActor
  static func prepareInstructionLoops() {
    for form in forms { _ = form.loop(1, counted.0, counted.1) }
  }

  let rounds: Rounds
  let objects: Int
  let worker = WorkerThread()
  let secondWorker = WorkerThread()

  @MainActor
  func run() async -> Result {
    let first = (Subject(), SubjectWithToken())
    let second = (Subject(), SubjectWithToken())
    // Make every call site done for both objects: from another thread, as a user would.
    for form in PerObjectSuite.forms {
      _ = await worker.run { form.loop(1, first.0, first.1) }
      _ = await worker.run { form.loop(1, second.0, second.1) }
    }
    let forms = PerObjectSuite.forms
    var iterations: [Int] = []
    for form in forms {
      iterations.append(
        await rounds.iterations(for: { count in
          await worker.run { form.loop(count, first.0, first.1) }
        }))
    }
    var one = Array(repeating: [Double](), count: forms.count)
    var twoFirst = one
    var twoSecond = one
    var onCPU = one
    var overlap = one
    for round in 0..<rounds.rounds {
      for offset in forms.indices {
        let index = (round + offset) % forms.count
        let (form, count) = (forms[index], iterations[index])
        one[index].append(
          await worker.run { timed(count) { form.loop($0, first.0, first.1) } }.perCall)
        let gate = StartGate(threads: 2)
        async let a = worker.run {
          gate.arrive()
          return timed(count) { form.loop($0, first.0, first.1) }
        }
        async let b = secondWorker.run {
          gate.arrive()
          return timed(count) { form.loop($0, second.0, second.1) }
        }
        let (runA, runB) = await (a, b)
        twoFirst[index].append(runA.perCall)
        twoSecond[index].append(runB.perCall)
        let span = Double(max(runA.end, runB.end) - min(runA.start, runB.start))
        let both = Double(min(runA.end, runB.end)) - Double(max(runA.start, runB.start))
        overlap[index].append(max(0, both) / span)
        onCPU[index].append(
          min(runA.cpu / Double(runA.end - runA.start), runB.cpu / Double(runB.end - runB.start)))
      }
    }
    var rows: [Row] = []
    for (index, form) in forms.enumerated() {
      let count = 100_000
      let allocations = await worker.run {
        bench_allocations_begin()
        _ = form.loop(count, first.0, first.1)
        return bench_allocations_end()
      }
      rows.append(
        Row(
          name: form.name, oneThread: Timing(one[index]),
          twoThreads: Timing(zip(twoFirst[index], twoSecond[index]).map { ($0 + $1) / 2 }),
          firstOfTwo: twoFirst[index], secondOfTwo: twoSecond[index], onCPU: onCPU[index],
          overlap: overlap[index],
          allocationsPerCall: Double(allocations) / Double(count)))
    }
    return Result(rows: rows, memory: await memory())
  }

  /// Heap per live object, each form in a process of its own (see ``measureMemory(of:count:)``),
  /// and what a token stored on the object adds to the object.
  @MainActor
  private func memory() async -> [Memory] {
    var results: [Memory] = []
    for form in PerObjectSuite.forms where form.firstCalls != nil {
      if let result = await DriverProcess.spawn(
        "objects-memory", driver: "dispatchMain", quick: objects < 10_000, as: Memory.self,
        extra: [form.name])
      {
        results.append(result)
      }
    }
    let count = objects
    let (plain, withToken) = await worker.run {
      var start = bench_heap_in_use()
      let plain = (0..<count).map { _ in Subject() }
      let plainBytes = bench_heap_in_use() - start
      start = bench_heap_in_use()
      let holders = (0..<count).map { _ in SubjectWithToken() }
      let holderBytes = bench_heap_in_use() - start
      withExtendedLifetime((plain, holders)) {}
      return (plainBytes, holderBytes)
    }
    results.append(
      Memory(
        name: PerObjectSuite.referenceName, objects: count,
        bytesPerObject: Double(withToken - plain) / Double(count), allocationsPerFirstCall: 0))
    return results
  }

  /// The child side of the memory measurement, in a process whose per-object table is empty:
  /// heap in use before and after the first call of `form`'s call site on each of `count` live
  /// objects, from a background thread (the objects are made before the first measurement).
  static func measureMemory(of name: String, count: Int) -> Memory {
    guard let form = forms.first(where: { $0.name == name }), let firstCalls = form.firstCalls
    else { fatalError("no per-object form named \(name)") }
    let subjects = (0..<count).map { _ in Subject() }
    let before = bench_heap_in_use()
    bench_process_allocations_begin()
    firstCalls(subjects)
    let allocations = bench_process_allocations_end()
    let bytes = bench_heap_in_use() - before
    withExtendedLifetime(subjects) {}
    return Memory(
      name: name, objects: count, bytesPerObject: Double(bytes) / Double(count),
      allocationsPerFirstCall: Double(allocations) / Double(count))
  }
}

/// Lets threads start a measurement together: each waits, spinning, until all have arrived, or
/// for at most 50 ms (on a busy machine one may not get a CPU for that long).
private final class StartGate: Sendable {
  private let arrived = Atomic(0)
  private let threads: Int

  init(threads: Int) { self.threads = threads }

  func arrive() {
    arrived.add(1, ordering: .acquiringAndReleasing)
    let deadline = now() + 50_000_000
    while arrived.load(ordering: .acquiring) < threads && now() < deadline {}
  }
}

/// Nanoseconds per call of a loop of `count` calls; when the loop started and ended, and the
/// nanoseconds of CPU time the thread spent meanwhile.
private func timed(
  _ count: Int, _ loop: (Int) -> Int
) -> (perCall: Double, start: UInt64, end: UInt64, cpu: Double) {
  let cpuStart = threadCPUNanoseconds()
  let start = now()
  let checksum = loop(count)
  let end = now()
  let cpu = threadCPUNanoseconds() - cpuStart
  if checksum == Int.min { print("") }  // keep the checksum alive
  return (Double(end - start) / Double(count), start, end, cpu)
}

private func threadCPUNanoseconds() -> Double {
  var time = timespec()
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
  return Double(time.tv_sec) * 1e9 + Double(time.tv_nsec)
}
