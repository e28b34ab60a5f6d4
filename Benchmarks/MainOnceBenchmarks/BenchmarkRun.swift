import Foundation

/// The whole benchmark: fast paths in this process, first calls and races in child processes
/// (one per run-loop driver), then the table, the targets and the JSON file.
struct BenchmarkRun {
  let quick: Bool
  let jsonPath: String

  struct Output: Codable {
    let machine: Machine
    let fastPath: [FastPathSuite.Row]
    let scaling: [FastPathSuite.Scaling]
    let firstCall: [FirstCallProcess.Result]
    let targets: [Target]
  }

  /// Whether a target was met.
  enum Verdict: String, Codable {
    case met
    /// The rounds disagree: some meet the target, some do not.
    case withinNoise = "within noise"
    case missed = "MISSED"
  }

  struct Target: Codable {
    let name: String
    let measured: String
    let verdict: Verdict
    let note: String
  }

  @MainActor
  func run() async {
    let machine = Machine.current
    print("MainOnce benchmarks (swift run -c release MainOnceBenchmarks\(quick ? " --quick" : ""))")
    print("machine: \(machine.description)\n")
    let rounds = Rounds(rounds: quick ? 3 : 11, sampleNanoseconds: quick ? 2_000_000 : 20_000_000)
    let rows: [FastPathSuite.Row]
    let scaling: [FastPathSuite.Scaling]
    do {
      (rows, scaling) = try await FastPathSuite(rounds: rounds).run()
    } catch {
      print("cannot prepare the fast paths: \(error)")
      return
    }
    Report.printFastPath(rows, rounds: rounds)
    Report.printAllocations(rows)
    Report.printScaling(scaling)
    var firstCalls: [FirstCallProcess.Result] = []
    for driver in ["dispatchMain", "runLoop", "mainQueueDriver"] {
      if let result = await FirstCallProcess.spawn(driver: driver, quick: quick) {
        firstCalls.append(result)
      }
    }
    Report.printFirstCalls(firstCalls)
    Report.printRaces(firstCalls)
    let targets = Targets.evaluate(rows: rows, firstCalls: firstCalls)
    Report.printTargets(targets)
    let output = Output(
      machine: machine, fastPath: rows, scaling: scaling, firstCall: firstCalls, targets: targets)
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
    encoder.nonConformingFloatEncodingStrategy = .convertToString(
      positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")
    do {
      try encoder.encode(output).write(to: URL(fileURLWithPath: jsonPath))
      print("\nJSON: \(jsonPath)")
    } catch {
      print("\ncannot write \(jsonPath): \(error)")
    }
  }
}

/// What the numbers were measured on.
struct Machine: Codable, CustomStringConvertible {
  let cpu: String
  let cores: Int
  let kernel: String

  static var current: Machine {
    let cpuInfo = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)) ?? ""
    let model =
      cpuInfo.split(separator: "\n").first { $0.hasPrefix("model name") }
      .flatMap { $0.split(separator: ":", maxSplits: 1).last }
      .map { $0.trimmingCharacters(in: .whitespaces) } ?? "unknown CPU"
    let kernel =
      (try? String(contentsOfFile: "/proc/sys/kernel/osrelease", encoding: .utf8))?
      .trimmingCharacters(in: .whitespacesAndNewlines) ?? "unknown kernel"
    return Machine(cpu: model, cores: ProcessInfo.processInfo.activeProcessorCount, kernel: kernel)
  }

  var description: String { "\(cpu), \(cores) cores, Linux \(kernel)" }
}
