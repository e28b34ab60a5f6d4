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
    case runLoop = "run-loop"
  }

  let groups: [Group]
  let quick: Bool
  /// Where to write the JSON; `nil`: nowhere.
  let jsonPath: String?

  /// What `--json` writes. A run that writes into an existing file replaces the groups it
  /// measured, their numbers and their records, and keeps the others: groups measured by
  /// separate runs each keep the record of their own run.
  struct Output: Codable {
    /// How each group was measured, by group name (`first-call`, …).
    var groups: [String: GroupRecord] = [:]
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
    var runLoop: [RunLoopServing.Result]?
  }

  /// The run that measured a group, as the benchmark binary saw it when it ran: written by the
  /// binary itself, never by hand.
  struct GroupRecord: Codable {
    /// The command, as run: the executable's path (relative to `directory` when it is inside
    /// it), which names the scratch path and the configuration, and the arguments.
    let command: String
    /// The working directory of the command.
    let directory: String
    /// The compiler that built the benchmark binary, as its debug information names it: the
    /// first line of that toolchain's `swift --version`.
    let toolchain: String
    let machine: Machine
    /// When the group started, in UTC (ISO 8601).
    let date: String
    /// The share of the CPUs that other processes used while the group ran.
    let otherLoad: Double
    /// The group's targets, as judged from what it measured: "met", "within noise" or "MISSED".
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
    let invocation = Invocation.current
    print("MainOnce benchmarks (\(invocation.command))")
    print("machine: \(machine.description); toolchain: \(invocation.toolchain)\n")
    var output = Output()
    if let jsonPath {
      guard let existing = Self.read(jsonPath) else { return }
      output = existing
    }
    let rounds = Rounds(rounds: quick ? 3 : 11, sampleNanoseconds: quick ? 2_000_000 : 20_000_000)
    var allTargets: [Target] = []
    for group in groups {
      let start = OtherLoad.now()
      let date = Date()
      defer {
        let share = OtherLoad.now().share(since: start)
        Report.printOtherLoad(share, group: group.rawValue)
        let targets = Targets.evaluate(group, in: output)
        allTargets += targets
        output.groups[group.rawValue] = GroupRecord(
          command: invocation.command, directory: invocation.directory,
          toolchain: invocation.toolchain, machine: machine,
          date: date.formatted(.iso8601), otherLoad: share, targets: targets)
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
        let results = await DriverProcess.spawnEach(
          "race", drivers: DriverProcess.drivers, quick: quick, as: Races.Result.self)
        Report.printRaces(results)
        output.race = results
      case .trackedWaits:
        let result = await TrackedWaitSuite(rounds: rounds, quick: quick).run()
        Report.printTrackedWaits(result, rounds: rounds)
        output.trackedWaits = result
      case .runLoop:
        let results = await DriverProcess.spawnEach(
          "run-loop", drivers: RunLoopServing.servers, quick: quick, as: RunLoopServing.Result.self)
        Report.printRunLoop(results)
        output.runLoop = results
      }
    }
    Report.printTargets(allTargets)
    guard let jsonPath else { return }
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
    encoder.nonConformingFloatEncodingStrategy = .convertToString(
      positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")
    do {
      try encoder.encode(output).write(to: URL(fileURLWithPath: jsonPath))
      let kept = output.groups.keys.filter { name in !groups.contains { $0.rawValue == name } }
      print(
        "\nJSON: \(jsonPath)"
          + (kept.isEmpty
            ? "" : " (kept from an earlier run: \(kept.sorted().joined(separator: ", ")))"))
    } catch {
      print("\ncannot write \(jsonPath): \(error)")
    }
  }

  /// The results already at `path`, to merge this run's groups into; empty if there is no file.
  /// `nil`, after saying why, if the file is there but cannot be read as results: this run then
  /// writes nothing rather than overwrite it.
  private static func read(_ path: String) -> Output? {
    guard FileManager.default.fileExists(atPath: path) else { return Output() }
    let decoder = JSONDecoder()
    decoder.nonConformingFloatDecodingStrategy = .convertFromString(
      positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")
    do {
      return try decoder.decode(Output.self, from: Data(contentsOf: URL(fileURLWithPath: path)))
    } catch {
      print("cannot read \(path) to merge into it (\(error)): move it away or name another file")
      return nil
    }
  }
}

/// How this process was started, and by which compiler it was built.
struct Invocation {
  let command: String
  let directory: String
  let toolchain: String

  static var current: Invocation {
    let directory = FileManager.default.currentDirectoryPath
    let executable =
      (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
      ?? CommandLine.arguments[0]
    let shown =
      executable.hasPrefix(directory + "/")
      ? String(executable.dropFirst(directory.count + 1)) : executable
    let command = ([shown] + CommandLine.arguments.dropFirst()).map(shellQuoted)
      .joined(separator: " ")
    return Invocation(command: command, directory: directory, toolchain: compiler(of: executable))
  }

  /// The first line of `swift --version` of the toolchain that compiled `executable`: the
  /// Swift compiler writes it into the debug information of every module it compiles
  /// (DWARF's producer), and SwiftPM's release builds keep debug information.
  static func compiler(of executable: String) -> String {
    let marker = Data("Swift version ".utf8)
    guard let binary = try? Data(contentsOf: URL(fileURLWithPath: executable)),
      let start = binary.range(of: marker),
      let end = binary[start.lowerBound...].firstIndex(where: { $0 == 0 || $0 == 10 })
    else { return "unknown: the binary has no debug information naming its compiler" }
    return String(decoding: binary[start.lowerBound..<end], as: UTF8.self)
  }

  private static func shellQuoted(_ word: String) -> String {
    let plain = word.allSatisfy { $0.isLetter || $0.isNumber || "-_./=:,+@".contains($0) }
    return plain && !word.isEmpty
      ? word : "'" + word.replacingOccurrences(of: "'", with: "'\\''") + "'"
  }
}

/// What the numbers were measured on: the CPU's model (`/proc/cpuinfo`), the CPUs this process
/// may run on, and the kernel as `uname` names it (`Linux 6.18.44-…`).
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
    var names = utsname()
    uname(&names)
    func text<T>(_ field: T) -> String {
      withUnsafeBytes(of: field) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
    }
    return Machine(
      cpu: model, cores: ProcessInfo.processInfo.activeProcessorCount,
      kernel: "\(text(names.sysname)) \(text(names.release))")
  }

  var description: String { "\(cpu), \(cores) cores, \(kernel)" }
}
