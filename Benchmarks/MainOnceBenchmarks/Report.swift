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

  static func printFirstCalls(_ results: [FirstCallProcess.Result]) {
    guard let first = results.first else { return }
    print(
      "First call of a fresh token from another thread: ns per call, median (best) of"
        + " \(first.rounds) rounds of \(first.tokensPerRound) tokens; ratio of medians to"
        + " main.async and a park, the hop MainOnce makes")
    print(pad("", 40) + results.map { pad(driverName($0.driver), 28) }.joined())
    let lines: [(String, KeyPath<FirstCallProcess.Result, Timing>)] = [
      ("DispatchQueue.main.sync {} (bare)", \.mainQueueSync),
      ("main.async {} and a park", \.asyncAndPark),
      ("onceOnMain(token:)", \.onceOnMain),
      ("Khan port", \.khanPort),
    ]
    for (name, path) in lines {
      let cells = results.map { result in
        let timing = result[keyPath: path]
        let ratio = timing.median / result.asyncAndPark.median
        return pad(
          "\(format(timing.median, decimals: 0)) (\(format(timing.best, decimals: 0)))"
            + " \(format(ratio, decimals: 2))×", 28)
      }
      print(pad(name, 40) + cells.joined())
    }
    print()
  }

  static func printRaces(_ results: [FirstCallProcess.Result]) {
    guard let first = results.first else { return }
    print(
      "\(first.race.threads) threads racing on a fresh token, \(first.race.races) races:"
        + " main-queue work items per race, and µs until the last caller returns (median)")
    for result in results {
      let race = result.race
      print(
        "  \(pad(driverName(result.driver), 22)) onceOnMain(token:) "
          + "\(format(race.onceOnMainWorkItems, decimals: 2)) items,"
          + " \(format(race.onceOnMainWallTime.median, decimals: 0)) µs;"
          + "  Khan port \(format(race.khanPortWorkItems, decimals: 2)) items,"
          + " \(format(race.khanPortWallTime.median, decimals: 0)) µs")
    }
    print()
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

  static func driverName(_ driver: String) -> String {
    switch driver {
    case "runLoop": "RunLoop.main.run()"
    case "mainQueueDriver": "MainQueueDriver (poll)"
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
