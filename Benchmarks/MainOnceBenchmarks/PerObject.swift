import CBenchmarkSupport
import Dispatch
import Foundation
import Synchronization

// The weak-load rows need the switch among MainOnce's test counters, which only a build for
// tests has (see `weakLoadForms`).
#if MAINONCE_INSTRUMENTATION
  @testable import MainOnce
#else
  import MainOnce
#endif

/// `MainOnceBenchmarks objects`: per-object once on a call site that is done for its object.
///
/// For each form, in interleaved rounds: ns per call on one thread; the same with two threads
/// at once, each on an object of its own (ns per call each, and per round the ratio to the
/// round's one-thread time); heap allocations per call. Each per-object form as MainOnce runs
/// it, telling the object's lifetime from its side table, and, in a build for tests only, again
/// on cells made with `Instrumentation.objectCellsUseWeakLoads`, which take MainOnce's own
/// weak-load path (the one used where the side-table layout fails its self-test). Beside them,
/// as the reference, a token stored on the object; and what a weak reference costs the object
/// itself: a strong retain and release of an object that has never been weakly referenced and
/// of one that has (its counts then live in a side table). Then memory: bytes of heap per live
/// object with one call site used, from the heap in use before and after the first call on each
/// of 10,000 live objects, and the side table that the first weak reference to an object
/// allocates.
struct PerObjectSuite {
  struct Row: Codable {
    let name: String
    let kind: Kind
    /// Whether the reference counts the two threads touch share a cache line; `nil` where
    /// they touch none.
    let countsShareLine: Bool?
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

  /// What a row measures.
  enum Kind: String, Codable {
    /// A per-object call as MainOnce makes it.
    case mainOnce
    /// The same call on cells that check the object's lifetime with a weak load.
    case weakLoad
    /// The reference, a token stored on the object.
    case reference
    /// A strong retain and release, with or without a side table: no MainOnce call.
    case retainRelease
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

  /// The objects one thread calls for: one whose cells read its side table, one whose cells
  /// were made to use weak loads, one that stores a token, and one never weakly referenced.
  ///
  /// Each weak load and each retain of a weakly referenced object writes its side table's
  /// counts; two threads then slow each other down if those of their two objects share a cache
  /// line. Side tables are 48-byte heap chunks, so where they fall is up to the allocator:
  /// ``pair()`` gives the two threads `weakLoad` objects whose counts are lines apart and
  /// `sharingLine` objects whose counts share one, to measure both cases; and, for the
  /// side-table read, `sharingLineRead` objects whose counts share one too.
  struct Subjects: Sendable {
    let sideTable = Subject()
    let weakLoad: Subject
    let sharingLine: Subject
    let sharingLineRead: Subject
    let holder = SubjectWithToken()
    let plain = Subject()

    /// Subjects for two threads.
    static func pair() -> (Subjects, Subjects) {
      struct WeakSlot {
        weak var object: Subject?
      }
      let pool = (0..<64).map { _ in Subject() }
      var slots = [WeakSlot](repeating: WeakSlot(), count: pool.count)
      for index in pool.indices { slots[index].object = pool[index] }
      let lines = pool.map { countsLine(of: $0) }
      var apart = (0, pool.count - 1)
      var sharing: [(Int, Int)] = []
      for i in pool.indices {
        for j in pool.indices where j > i {
          if lines[i] == lines[j], sharing.allSatisfy({ ![$0.0, $0.1].contains(i) }) {
            sharing.append((i, j))
          }
          if max(lines[i], lines[j]) - min(lines[i], lines[j]) >= 2 { apart = (i, j) }
        }
      }
      // Without two sharing pairs (an allocator that spaces them out), objects as they come.
      while sharing.count < 2 { sharing.append((sharing.count * 2 + 1, sharing.count * 2 + 2)) }
      withExtendedLifetime(slots) {}
      return (
        Subjects(
          weakLoad: pool[apart.0], sharingLine: pool[sharing[0].0],
          sharingLineRead: pool[sharing[1].0]),
        Subjects(
          weakLoad: pool[apart.1], sharingLine: pool[sharing[0].1],
          sharingLineRead: pool[sharing[1].1])
      )
    }

    /// The cache line of the counts a retain writes: in the object until it is weakly
    /// referenced, then in its side table (at offset 16).
    static func countsLine(of object: AnyObject) -> UInt {
      let pointer = UnsafeRawPointer(Unmanaged.passUnretained(object).toOpaque())
      let sideTable = UInt(bench_side_table(pointer))
      return sideTable == 0 ? (UInt(bitPattern: pointer) + 8) / 64 : (sideTable + 16) / 64
    }
  }

  /// Whether the reference counts that `form`'s loop touches are on one cache line for the two
  /// threads; `nil` for a form that touches none.
  static func countsShareLine(_ form: Form, _ first: Subjects, _ second: Subjects) -> Bool? {
    form.countsOf.map {
      Subjects.countsLine(of: $0(first)) == Subjects.countsLine(of: $0(second))
    }
  }

  /// The forms measured, each through a probe that is one call site. `loop` calls the probe
  /// `count` times for an object and returns a checksum; `firstCalls` makes the first call for
  /// each of a list of objects.
  struct Form: Sendable {
    let name: String
    let kind: Kind
    let loop: @Sendable (_ count: Int, Subjects) -> Int
    var firstCalls: (@Sendable ([Subject]) -> Void)? = nil
    /// The object whose reference counts the loop writes (weak loads, retains) or reads (the
    /// side-table check), if it touches any.
    var countsOf: (@Sendable (Subjects) -> Subject)? = nil
    /// Whether `MainOnceBenchmarks instructions` counts it (another object's row suffices).
    var counted = true
  }

  static let referenceName = "token stored on the object (reference)"

  static let forms: [Form] =
    [
      Form(
        name: "runOnce(for:)", kind: .mainOnce,
        loop: { count, objects in repeatProbe(count) { Probes.runOnce(objects.sideTable) } },
        firstCalls: { objects in for object in objects { _ = Probes.runOnce(object) } }),
      Form(
        name: "onceOnMain(for:)", kind: .mainOnce,
        loop: { count, objects in repeatProbe(count) { Probes.onceOnMain(objects.sideTable) } },
        firstCalls: { objects in for object in objects { _ = Probes.onceOnMain(object) } }),
      Form(
        name: "runOnce(for:), side tables on one line", kind: .mainOnce,
        loop: { count, objects in repeatProbe(count) { Probes.runOnce(objects.sharingLineRead) } },
        countsOf: { $0.sharingLineRead }, counted: false),
    ] + weakLoadForms + [
      Form(
        name: referenceName, kind: .reference,
        loop: { count, objects in repeatProbe(count) { Probes.token(objects.holder) } }),
      Form(
        name: "retain + release, never weakly referenced", kind: .retainRelease,
        loop: { count, objects in Probes.retainRelease(objects.plain, count) },
        countsOf: { $0.plain }, counted: false),
      Form(
        name: "retain + release, weakly referenced", kind: .retainRelease,
        loop: { count, objects in Probes.retainRelease(objects.weakLoad, count) },
        countsOf: { $0.weakLoad }, counted: false),
      Form(
        name: "retain + release, weakly referenced, side tables on one line",
        kind: .retainRelease,
        loop: { count, objects in Probes.retainRelease(objects.sharingLine, count) },
        countsOf: { $0.sharingLine }, counted: false),
    ]

  /// The per-object calls again, on cells that tell their object's lifetime with a weak load.
  /// Only in a build for tests (`-enable-testing -DMAINONCE_INSTRUMENTATION`, see the README):
  /// the switch that makes such cells is one of MainOnce's test counters, not in the library
  /// that dependents build.
  static var weakLoadForms: [Form] {
    #if MAINONCE_INSTRUMENTATION
      [
        Form(
          name: "runOnce(for:), weak load", kind: .weakLoad,
          loop: { count, objects in repeatProbe(count) { Probes.runOnce(objects.weakLoad) } },
          countsOf: { $0.weakLoad }),
        Form(
          name: "onceOnMain(for:), weak load", kind: .weakLoad,
          loop: { count, objects in repeatProbe(count) { Probes.onceOnMain(objects.weakLoad) } },
          countsOf: { $0.weakLoad }),
        Form(
          name: "runOnce(for:), weak load, side tables on one line", kind: .weakLoad,
          loop: { count, objects in repeatProbe(count) { Probes.runOnce(objects.sharingLine) } },
          countsOf: { $0.sharingLine }, counted: false),
      ]
    #else
      []
    #endif
  }

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

    static func retainRelease(_ object: Subject, _ count: Int) -> Int {
      bench_retain_release(Unmanaged.passUnretained(object).toOpaque(), count)
    }
  }

  /// Whether the two threads of `row` each had a CPU: on one for at least 90% of their loops,
  /// and running at the same time for at least 90% of their span (medians). Asked of the
  /// reference row, which takes no lock.
  static func ranInParallel(_ row: Row) -> Bool {
    Timing(row.onCPU).median >= 0.9 && Timing(row.overlap).median >= 0.9
  }

  /// The objects whose call sites `MainOnceBenchmarks instructions` counts.
  static let counted = Subjects.pair().0

  /// Loops for `MainOnceBenchmarks instructions`, on ``counted``: those the fast-path list does
  /// not have already.
  static let instructionLoops: [(name: String, loop: @Sendable (Int) -> Int)] = forms.filter {
    $0.name != "onceOnMain(for:)" && $0.counted
  }.map { form in
    (
      form.kind == .reference ? form.name : "\(form.name) (per object)",
      { form.loop($0, counted) }
    )
  }

  /// Makes every call site done for ``counted``, in main context.
  @MainActor
  static func prepareInstructionLoops() {
    for form in forms { makeDone(form) { _ = form.loop(1, counted) } }
  }

  /// Runs `firstCall`, which makes `form`'s call site done, with cells that use weak loads if
  /// the form is one of those.
  @MainActor
  static func makeDone(_ form: Form, _ firstCall: @MainActor () async -> Void) async {
    cellsUseWeakLoads(form.kind == .weakLoad)
    defer { cellsUseWeakLoads(false) }
    await firstCall()
  }

  @MainActor
  static func makeDone(_ form: Form, _ firstCall: () -> Void) {
    cellsUseWeakLoads(form.kind == .weakLoad)
    defer { cellsUseWeakLoads(false) }
    firstCall()
  }

  /// Sets MainOnce's switch for the cells made from now on; a build without it has no
  /// weak-load forms, and its cells always read the side table.
  private static func cellsUseWeakLoads(_ weakLoads: Bool) {
    #if MAINONCE_INSTRUMENTATION
      Instrumentation.objectCellsUseWeakLoads = weakLoads
    #endif
  }

  let rounds: Rounds
  let objects: Int
  let worker = WorkerThread()
  let secondWorker = WorkerThread()
  /// The weak-load forms run on threads of their own, so that each thread's cache of cells
  /// holds no more entries than before they were added.
  let weakWorker = WorkerThread()
  let secondWeakWorker = WorkerThread()

  @MainActor
  func run() async -> Result {
    let (first, second) = Subjects.pair()
    let forms = PerObjectSuite.forms
    func workers(_ form: Form) -> (WorkerThread, WorkerThread) {
      form.kind == .weakLoad ? (weakWorker, secondWeakWorker) : (worker, secondWorker)
    }
    // Make every call site done for both objects: from another thread, as a user would.
    for form in forms {
      let (worker, _) = workers(form)
      await PerObjectSuite.makeDone(form) {
        _ = await worker.run { form.loop(1, first) }
        _ = await worker.run { form.loop(1, second) }
      }
    }
    var iterations: [Int] = []
    for form in forms {
      let (worker, _) = workers(form)
      iterations.append(
        await rounds.iterations(for: { count in
          await worker.run { form.loop(count, first) }
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
        let (worker, secondWorker) = workers(form)
        one[index].append(
          await worker.run { timed(count) { form.loop($0, first) } }.perCall)
        let gate = StartGate(threads: 2)
        async let a = worker.run {
          gate.arrive()
          return timed(count) { form.loop($0, first) }
        }
        async let b = secondWorker.run {
          gate.arrive()
          return timed(count) { form.loop($0, second) }
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
      let (worker, _) = workers(form)
      let allocations = await worker.run {
        bench_allocations_begin()
        _ = form.loop(count, first)
        return bench_allocations_end()
      }
      rows.append(
        Row(
          name: form.name, kind: form.kind,
          countsShareLine: PerObjectSuite.countsShareLine(form, first, second),
          oneThread: Timing(one[index]),
          twoThreads: Timing(zip(twoFirst[index], twoSecond[index]).map { ($0 + $1) / 2 }),
          firstOfTwo: twoFirst[index], secondOfTwo: twoSecond[index], onCPU: onCPU[index],
          overlap: overlap[index],
          allocationsPerCall: Double(allocations) / Double(count)))
    }
    return Result(rows: rows, memory: await memory())
  }

  /// Heap per live object, each form in a process of its own (see ``measureMemory(of:count:)``),
  /// what a token stored on the object adds to the object, and the side table that the first
  /// weak reference to an object allocates.
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
    results.append(await worker.run { PerObjectSuite.sideTableMemory(count: count) })
    return results
  }

  static let sideTableName = "a weak reference's side table"

  /// Heap in use before and after forming the first weak reference to each of `count` live
  /// objects (into slots allocated beforehand), and allocations per weak reference.
  static func sideTableMemory(count: Int) -> Memory {
    struct WeakSlot {
      weak var object: Subject?
    }
    let subjects = (0..<count).map { _ in Subject() }
    var slots = [WeakSlot](repeating: WeakSlot(), count: count)
    let before = bench_heap_in_use()
    bench_allocations_begin()
    for index in 0..<count { slots[index].object = subjects[index] }
    let allocations = bench_allocations_end()
    let bytes = bench_heap_in_use() - before
    withExtendedLifetime((subjects, slots)) {}
    return Memory(
      name: sideTableName, objects: count, bytesPerObject: Double(bytes) / Double(count),
      allocationsPerFirstCall: Double(allocations) / Double(count))
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

extension PerObjectSuite.Row {
  /// Reads a row as written, and one written before rows had a kind and a cache-line column
  /// (the `objects` group of a results.json made then): such rows were the calls as MainOnce
  /// makes them and the reference.
  init(from decoder: any Decoder) throws {
    let container = try decoder.container(keyedBy: CodingKeys.self)
    name = try container.decode(String.self, forKey: .name)
    kind =
      try container.decodeIfPresent(PerObjectSuite.Kind.self, forKey: .kind)
      ?? (name == PerObjectSuite.referenceName ? .reference : .mainOnce)
    countsShareLine = try container.decodeIfPresent(Bool.self, forKey: .countsShareLine)
    oneThread = try container.decode(Timing.self, forKey: .oneThread)
    twoThreads = try container.decode(Timing.self, forKey: .twoThreads)
    firstOfTwo = try container.decode([Double].self, forKey: .firstOfTwo)
    secondOfTwo = try container.decode([Double].self, forKey: .secondOfTwo)
    onCPU = try container.decode([Double].self, forKey: .onCPU)
    overlap = try container.decode([Double].self, forKey: .overlap)
    allocationsPerCall = try container.decode(Double.self, forKey: .allocationsPerCall)
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
