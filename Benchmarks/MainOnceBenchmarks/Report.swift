import Foundation

/// Prints the tables.
enum Report {
  static func printFastPath(_ rows: [FastPathSuite.Row], rounds: Rounds) {
    print(
      "Fast path on a done token: ns per call, best (median) of \(rounds.rounds) interleaved"
        + " rounds; ratio of best to \(Candidate.baselineName)")
    let baseline = rows.first { $0.name == Candidate.baselineName }
    let nameWidth = rows.map(\.name.count).max() ?? 0
    print(pad("", nameWidth) + "   " + pad("main queue", 26) + "   " + "another thread")
    for row in rows {
      print(
        pad(row.name, nameWidth) + "   "
          + pad(cell(row.mainQueue, baseline?.mainQueue), 26) + "   "
          + cell(row.otherThread, baseline?.otherThread))
    }
    print()
  }

  static func printAllocations(_ rows: [FastPathSuite.Row]) {
    let counts = rows.compactMap { row in
      row.allocationsPerCall.map { "\(row.name) \(format($0, decimals: 3))" }
    }
    print("Heap allocations per fast-path call (another thread): " + counts.joined(separator: ", "))
    print()
  }

  static func printScaling(_ scaling: [FastPathSuite.Scaling]) {
    print("Fast-path throughput, calls per µs: one thread, two threads at once, and the ratio")
    for entry in scaling {
      print(
        "  \(entry.name): \(format(entry.oneThreadCallsPerMicrosecond, decimals: 0)),"
          + " \(format(entry.twoThreadsCallsPerMicrosecond, decimals: 0))"
          + " (\(format(entry.factor, decimals: 2))×)")
    }
    print()
  }

  static func printObjects(_ result: PerObjectSuite.Result, rounds: Rounds) {
    print(
      "Per-object once on a done call site: ns per call, median (best) of \(rounds.rounds)"
        + " interleaved rounds; two threads at once, each on its own object, and per round"
        + " their time over one thread's (median, quartiles); the share of the time the two"
        + " threads were each on a CPU (a contended lock puts them to sleep); whether the"
        + " reference counts the two threads touch share a cache line")
    let reference = result.rows.first { $0.name == PerObjectSuite.referenceName }
    let nameWidth = result.rows.map(\.name.count).max() ?? 0
    print(
      pad("", nameWidth) + "   " + pad("one thread", 24) + pad("two threads (each)", 22)
        + pad("two ÷ one", 20) + pad("on CPU", 8) + pad("allocations/call", 18) + "counts")
    for row in result.rows {
      let overReference = reference.map {
        " \(format(row.oneThread.median / $0.oneThread.median, decimals: 0))×"
      }
      print(
        pad(row.name, nameWidth) + "   "
          + pad(
            "\(timing(row.oneThread, decimals: 2))"
              + (row.name == PerObjectSuite.referenceName ? "" : overReference ?? ""), 24)
          + pad(timing(row.twoThreads, decimals: 2), 22)
          + pad(Paired.ratio(row.twoThreads, over: row.oneThread).short, 20)
          + pad("\(format(Timing(row.onCPU).median * 100, decimals: 0))%", 8)
          + pad(format(row.allocationsPerCall, decimals: 3), 18)
          + (row.countsShareLine.map { $0 ? "one line" : "apart" } ?? "—"))
    }
    if let reference = result.rows.first(where: { $0.name == PerObjectSuite.referenceName }),
      !PerObjectSuite.ranInParallel(reference)
    {
      print(
        "Note: the reference row's two threads were each on a CPU for"
          + " \(format(Timing(reference.onCPU).median * 100, decimals: 0))% of their loops and"
          + " ran at the same time for \(format(Timing(reference.overlap).median * 100, decimals: 0))%"
          + " of their span (medians): they did not each have a CPU, and the two-thread column"
          + " says little about contention.")
    }
    printLivenessComparison(result.rows)
    let memory = result.memory.map { entry in
      switch entry.name {
      case PerObjectSuite.referenceName:
        "\(entry.name): +\(format(entry.bytesPerObject, decimals: 0)) bytes in the object"
      case PerObjectSuite.sideTableName:
        "\(entry.name): \(format(entry.bytesPerObject, decimals: 0)) bytes"
          + " (\(format(entry.allocationsPerFirstCall, decimals: 1)) allocations per first weak"
          + " reference), included in the per-object forms' figures"
      default:
        "\(entry.name): \(format(entry.bytesPerObject, decimals: 0)) bytes"
          + " (\(format(entry.allocationsPerFirstCall, decimals: 1)) allocations per first call)"
      }
    }
    print(
      "Heap per live object with one call site used (\(result.memory.first?.objects ?? 0)"
        + " objects, mallinfo2): " + memory.joined(separator: "; "))
    print()
  }

  /// Each weak-load row over its side-table row, and a retain and release of a weakly
  /// referenced object over one of an object never weakly referenced: per round, one thread,
  /// and the same with two threads.
  private static func printLivenessComparison(_ rows: [PerObjectSuite.Row]) {
    func row(_ name: String) -> PerObjectSuite.Row? { rows.first { $0.name == name } }
    let pairs = [
      ("runOnce(for:), weak load", "runOnce(for:)"),
      ("onceOnMain(for:), weak load", "onceOnMain(for:)"),
      (
        "runOnce(for:), weak load, side tables on one line",
        "runOnce(for:), side tables on one line"
      ),
      ("retain + release, weakly referenced", "retain + release, never weakly referenced"),
      (
        "retain + release, weakly referenced, side tables on one line",
        "retain + release, never weakly referenced"
      ),
    ]
    if !rows.contains(where: { $0.kind == .weakLoad }) {
      print(
        "No weak-load rows: the switch that makes cells use the weak load is in builds for tests"
          + " only (-Xswiftc -enable-testing -Xswiftc -DMAINONCE_INSTRUMENTATION; see the"
          + " README).")
    }
    print("Per round, over the row named second (median, quartiles):")
    for (slower, faster) in pairs {
      guard let slower = row(slower), let faster = row(faster) else { continue }
      print(
        "  \(slower.name) ÷ \(faster.name): one thread"
          + " \(Paired.ratio(slower.oneThread, over: faster.oneThread).short), two threads"
          + " \(Paired.ratio(slower.twoThreads, over: faster.twoThreads).short)")
    }
  }

  static func printSizes(_ rows: [Sizes.Row]) {
    print("Sizes in bytes: size (stride, alignment)")
    for row in rows {
      print("  \(pad(row.name, 26)) \(row.size) (\(row.stride), \(row.alignment))")
    }
    print()
  }

  @MainActor
  static func printInPlaceFirstCalls(_ result: InPlaceFirstCalls.Result) {
    print(
      "First call of a fresh cell in main context: ns per call, median (best) of \(result.rounds)"
        + " rounds of \(result.cellsPerRound) cells (after a warm-up); variants interleaved, turns"
        + " rotated; over dispatch_once_f per round (quartiles); heap allocations per call on"
        + " the calling thread; instructions per call under callgrind"
        + (result.instructionCalls.map {
          " (\($0) and \(2 * $0) first calls on the main thread before dispatchMain(), the"
            + " difference per call)"
        } ?? " (valgrind or strip is missing)"))
    let baseline = result.timings[InPlaceFirstCalls.dispatchOnce]
    for variant in InPlaceFirstCalls.variants {
      guard let timing = result.timings[variant.key] else { continue }
      let ratio = baseline.map { Paired.ratio(timing, over: $0).short } ?? "—"
      let allocations = result.allocations[variant.key].map { format($0, decimals: 2) } ?? "—"
      let instructions = result.instructions?[variant.key].map { format($0, decimals: 0) } ?? "—"
      print(
        pad(variant.name, 48) + pad(self.timing(timing, decimals: 1), 20) + pad(ratio, 24)
          + pad(allocations, 8) + instructions)
    }
    print()
  }

  static func printFirstCalls(_ results: [FirstCalls.Result]) {
    guard let first = results.first else { return }
    print(
      "First call of a fresh token from one background thread: ns per call, median (best) of"
        + " \(first.rounds) rounds of \(first.tokensPerRound) tokens (after a warm-up round);"
        + " variants interleaved, turns rotated"
        + (first.oneCPU
          ? "; every thread of each process on one CPU, so that no hop waits for the other CPU"
            + " to wake up" : ""))
    let line = columns(results, driver: \.driver, nameWidth: 52)
    for variant in FirstCalls.variants {
      line(variant.name) { result in
        result.timings[variant.key].map { timing($0, decimals: 0) } ?? "—"
      }
    }
    func pair(_ result: FirstCalls.Result) -> (Timing, Timing)? {
      guard let once = result.timings["onceOnMain"], let hop = result.timings[FirstCalls.bareHop]
      else { return nil }
      return (once, hop)
    }
    line("onceOnMain ÷ bare hop, per round (quartiles)") { result in
      pair(result).map { Paired.ratio($0.0, over: $0.1).short } ?? "—"
    }
    line("onceOnMain − bare hop, ns per round (quartiles)") { result in
      pair(result).map { Paired.difference($0.0, over: $0.1).short } ?? "—"
    }
    line("onceOnMain ÷ bare hop, ratio of medians") { result in
      pair(result).map { format($0.0.median / $0.1.median, decimals: 2) + "×" } ?? "—"
    }
    line("allocations per call, bare hop: thread/process") { result in
      result.allocations[FirstCalls.bareHop].map(allocations) ?? "—"
    }
    line("allocations per call, onceOnMain: thread/process") { result in
      result.allocations["onceOnMain"].map(allocations) ?? "—"
    }
    line("main-queue work items per onceOnMain first call") { result in
      format(result.workItemsPerCall, decimals: 2)
    }
    print()
  }

  static func printRaces(_ results: [Races.Result]) {
    guard let first = results.first else { return }
    print(
      "\(first.threads) threads racing on a fresh token, \(first.races) races each: µs from"
        + " releasing the ready threads to the last return, median (best); per race the ratio"
        + " (median, quartiles); main-queue work items per race")
    let line = columns(results, driver: \.driver, nameWidth: 44)
    line("onceOnMain(token:)") { timing($0.onceOnMain, decimals: 0) }
    line("Khan port") { timing($0.khanPort, decimals: 0) }
    line("onceOnMain ÷ Khan port, per race") {
      Paired.ratio($0.onceOnMain, over: $0.khanPort).short
    }
    line("onceOnMain ÷ Khan port, ratio of medians") {
      format($0.onceOnMain.median / $0.khanPort.median, decimals: 2) + "×"
    }
    line("work items: onceOnMain / Khan port") {
      "\(format($0.onceOnMainWorkItems, decimals: 2)) / \(format($0.khanPortWorkItems, decimals: 2))"
    }
    print()
  }

  static func printTrackedWaits(_ result: TrackedWaitSuite.Result, rounds: Rounds) {
    print(
      "Tracked waits that do not block, on a plain thread: ns per call, median (best) of"
        + " \(rounds.rounds) interleaved rounds; instructions per call (callgrind,"
        + " \(result.instructionIterations) and \(2 * result.instructionIterations) calls, the"
        + " difference per call); heap allocations per call after a warm-up")
    let nameWidth = result.rows.map(\.name.count).max() ?? 0
    print(pad("", nameWidth) + "   " + pad("ns", 16) + pad("instructions", 14) + "allocations")
    for row in result.rows {
      print(
        pad(row.name, nameWidth) + "   " + pad(timing(row.timing, decimals: 2), 16)
          + pad(row.instructionsPerCall.map { format($0, decimals: 2) } ?? "—", 14)
          + format(row.allocationsPerCall, decimals: 3))
    }
    print(
      "Tracked over plain: per round the ratio and the ns added (median, quartiles); the"
        + " instructions added")
    for pair in TrackedWaitSuite.pairs {
      guard let tracked = result.rows.first(where: { $0.name == pair.tracked }),
        let plain = result.rows.first(where: { $0.name == pair.plain })
      else { continue }
      let instructions =
        zip([tracked.instructionsPerCall], [plain.instructionsPerCall]).compactMap {
          tracked, plain in
          tracked.flatMap { tracked in plain.map { format(tracked - $0, decimals: 2) } }
        }.first ?? "—"
      print(
        "  \(pair.tracked) ÷ \(pair.plain): "
          + "\(Paired.ratio(tracked.timing, over: plain.timing).short),"
          + " +\(Paired.difference(tracked.timing, over: plain.timing).short) ns,"
          + " +\(instructions) instructions")
    }
    print(
      "Calls per µs, all threads together, each on a semaphore of its own, median (best);"
        + " per round over one thread's (median, quartiles)")
    let threadCounts = TrackedWaitSuite.threadCounts
    print(
      pad("", nameWidth) + "   "
        + threadCounts.map { pad("\($0) thread" + ($0 == 1 ? "" : "s"), 30) }.joined())
    for form in TrackedWaitSuite.scalingForms {
      let rows = result.scaling.filter { $0.name == form.name }
      guard let one = rows.first(where: { $0.threads == 1 }) else { continue }
      let cells = threadCounts.map { threads in
        guard let row = rows.first(where: { $0.threads == threads }) else { return pad("—", 30) }
        let factor =
          threads == 1
          ? "" : " " + Paired.ratio(row.callsPerMicrosecond, over: one.callsPerMicrosecond).short
        return pad(timing(row.callsPerMicrosecond, decimals: 0) + factor, 30)
      }
      print(pad(form.name, nameWidth) + "   " + cells.joined())
    }
    print()
  }

  static func printOtherLoad(_ share: Double, group: String) {
    guard share.isFinite else { return }
    print(
      "Other processes used \(format(share * 100, decimals: 0))% of the CPUs during \(group)"
        + (share >= 0.05
          ? ": hops and races were slowed down alike, which shrinks their ratios.\n" : ".\n"))
  }

  static func printTargets(_ targets: [BenchmarkRun.Target]) {
    print("Targets")
    for target in targets {
      print("  \(target.verdict.rawValue): \(target.name): \(target.measured)")
      if !target.note.isEmpty { print("         \(target.note)") }
    }
  }

  private static func cell(_ timing: Timing?, _ baseline: Timing?) -> String {
    guard let timing else { return "—" }
    let ratio = baseline.map { " \(format(timing.best / $0.best, decimals: 2))×" } ?? ""
    return
      "\(format(timing.best, decimals: 2)) (\(format(timing.median, decimals: 2)))\(ratio)"
  }

  private static func timing(_ timing: Timing, decimals: Int) -> String {
    "\(format(timing.median, decimals: decimals)) (\(format(timing.best, decimals: decimals)))"
  }

  private static func allocations(_ allocations: FirstCalls.Allocations) -> String {
    "\(format(allocations.callingThread, decimals: 2)) / \(format(allocations.process, decimals: 2))"
  }

  static func printRunLoop(_ results: [RunLoopServing.Result]) {
    guard let first = results.first else { return }
    print(
      "A program on a real GLib main loop, its main queue and RunLoop.main served three ways:"
        + " ms from submitting to running, one submission at a time at random moments"
        + " (\(first.mainQueue.samples.count) each), median / 95th percentile / worst; how late"
        + " a Timer of 100–150 ms scheduled from the main queue fires"
        + " (\(first.timerLateness.samples.count) timers); idle, with a Timer due in a minute, over \(format(first.idleSeconds, decimals: 0)) s:"
        + " the main thread's wake-ups a second and the process's CPU time")
    let line = columns(results, driver: \.server, nameWidth: 30, cellWidth: 28)
    func latency(_ latency: RunLoopServing.Latency) -> String {
      [latency.median, latency.p95, latency.worst].map { format($0, decimals: 2) }
        .joined(separator: " / ")
    }
    line("DispatchQueue.main.async") { latency($0.mainQueue) }
    line("@MainActor task") { latency($0.mainActor) }
    line("Timer, ms late") { latency($0.timerLateness) }
    line("idle wake-ups a second") { format($0.idleWakeUpsPerSecond, decimals: 2) }
    line("idle CPU time, ms") { format($0.idleCPUMilliseconds, decimals: 1) }
    line("idle drain() / read(), ns") { result in
      guard let drain = result.idleDrainNanoseconds, let read = result.emptyReadNanoseconds
      else { return "" }
      return "\(format(drain, decimals: 0)) / \(format(read, decimals: 0))"
    }
    if let driver = results.first(where: { $0.server == "glibDriver" }),
      let tickler = results.first(where: { $0.server == "glibTickler" })
    {
      line("tickler ÷ driver, medians") { result in
        guard result.server == "glibTickler" else { return "" }
        return "\(format(tickler.mainQueue.median / driver.mainQueue.median, decimals: 0))×,"
          + " \(format(tickler.mainActor.median / driver.mainActor.median, decimals: 0))×"
      }
    }
    print()
  }

  /// Prints the head of a table with a column per result, named after its driver, and returns
  /// what prints a row: its name, and each result's cell.
  private static func columns<Result>(
    _ results: [Result], driver: (Result) -> String, nameWidth: Int, cellWidth: Int = 26
  ) -> (String, (Result) -> String) -> Void {
    print(pad("", nameWidth) + results.map { pad(driverName(driver($0)), cellWidth) }.joined())
    return { name, cell in
      print(pad(name, nameWidth) + results.map { pad(cell($0), cellWidth) }.joined())
    }
  }

  static func driverName(_ driver: String) -> String {
    switch driver {
    case "runLoop": "RunLoop.main.run()"
    case "mainQueueDriver": "MainQueueDriver (poll)"
    case "glibDriver": "MainQueueDriver (GLib)"
    case "glibTickler": "50 ms tickler (GLib)"
    default: "dispatchMain()"
    }
  }

  static func format(_ value: Double, decimals: Int) -> String {
    String(format: "%.\(decimals)f", value)
  }

  private static func pad(_ text: String, _ width: Int) -> String {
    text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
  }
}
