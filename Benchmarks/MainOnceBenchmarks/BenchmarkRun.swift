import Foundation

/// A benchmark run: the groups asked for, each side by side with its baselines, then the
/// targets, and the JSON file.
struct BenchmarkRun {
  /// The groups, in the order a full run measures them.
  enum Group: String, CaseIterable, Codable {
    case fastPath = "fast-path"
    case objects
    case sizes
    case firstCall = "first-call"
    case inPlace = "in-place"
    case race
    case trackedWaits = "tracked-waits"
  }

  let groups: [Group]
  let quick: Bool
  /// Where to write the JSON; `nil`: nowhere.
  let jsonPath: String?

  struct Output: Codable {
    let machine: Machine
    let command: String
    var fastPath: [FastPathSuite.Row]?
    var scaling: [FastPathSuite.Scaling]?
    var objects: PerObjectSuite.Result?
    var sizes: [Sizes.Row]?
    var firstCall: [FirstCalls.Result]?
    /// The same with every thread of each driver process on one CPU.
    var firstCallOneCPU: [FirstCalls.Result]?
    var inPlace: InPlaceFirstCalls.Result?
    var race: [Races.Result]?
    var trackedWaits: TrackedWaitSuite.Result?
    /// The share of the CPUs that other processes used while each group ran, by group.
    var otherLoad: [String: Double] = [:]
    var targets: [Target] = []
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
    let command =
      "swift run -c release --package-path Benchmarks MainOnceBenchmarks "
      + CommandLine.arguments.dropFirst().joined(separator: " ")
    print("MainOnce benchmarks (\(command.trimmingCharacters(in: .whitespaces)))")
    print("machine: \(machine.description)\n")
    var output = Output(machine: machine, command: command)
    let rounds = Rounds(rounds: quick ? 3 : 11, sampleNanoseconds: quick ? 2_000_000 : 20_000_000)
    for group in groups {
      let start = OtherLoad.now()
      defer {
        let share = OtherLoad.now().share(since: start)
        output.otherLoad[group.rawValue] = share
        Report.printOtherLoad(share, group: group.rawValue)
      }
      switch group {
      case .fastPath:
        do {
          let (rows, scaling) = try await FastPathSuite(rounds: rounds).run()
          Report.printFastPath(rows, rounds: rounds)
          Report.printAllocations(rows)
          Report.printScaling(scaling)
          (output.fastPath, output.scaling) = (rows, scaling)
        } catch {
          print("cannot prepare the fast paths: \(error)\n")
        }
      case .objects:
        let result = await PerObjectSuite(rounds: rounds, objects: quick ? 1_000 : 10_000).run()
        Report.printObjects(result, rounds: rounds)
        output.objects = result
      case .sizes:
        let rows = Sizes.measure()
        Report.printSizes(rows)
        output.sizes = rows
      case .firstCall:
        var results: [FirstCalls.Result] = []
        var oneCPU: [FirstCalls.Result] = []
        for driver in DriverProcess.drivers {
          for pinned in [false, true] {
            if let result = await DriverProcess.spawn(
              "first-call", driver: driver, quick: quick, as: FirstCalls.Result.self,
              extra: pinned ? ["--one-cpu"] : [])
            {
              if pinned { oneCPU.append(result) } else { results.append(result) }
            }
          }
        }
        Report.printFirstCalls(results)
        Report.printFirstCalls(oneCPU)
        (output.firstCall, output.firstCallOneCPU) = (results, oneCPU)
      case .inPlace:
        let result = InPlaceFirstCalls.measure(quick: quick)
        Report.printInPlaceFirstCalls(result)
        output.inPlace = result
      case .race:
        var results: [Races.Result] = []
        for driver in DriverProcess.drivers {
          if let result = await DriverProcess.spawn(
            "race", driver: driver, quick: quick, as: Races.Result.self)
          {
            results.append(result)
          }
        }
        Report.printRaces(results)
        output.race = results
      case .trackedWaits:
        let result = await TrackedWaitSuite(rounds: rounds, quick: quick).run()
        Report.printTrackedWaits(result, rounds: rounds)
        output.trackedWaits = result
      }
    }
    output.targets = Targets.evaluate(output)
    Report.printTargets(output.targets)
    guard let jsonPath else { return }
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
