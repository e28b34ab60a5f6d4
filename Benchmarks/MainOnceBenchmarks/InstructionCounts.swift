import CBenchmarkSupport
import Foundation

/// `MainOnceBenchmarks instructions`: instructions per fast-path call, counted by valgrind's
/// callgrind, which gives the same count on every run whatever else the machine is doing.
///
/// Each loop runs twice under callgrind, with N and 2N calls; the difference divided by N is
/// the cost of one call, with start-up and the loop's set-up cancelled out. valgrind 3.19 cannot
/// read the DWARF 5 line tables Swift 6.3 emits, so it runs a copy stripped of debug info.
enum InstructionCounts {
  /// Blocking fast paths, run on a plain thread (as the "another thread" column).
  static let loops: [(name: String, loop: @Sendable (Int) -> Int)] =
    Candidate.all.compactMap {
      guard case .blocking(let loop) = $0.onOtherThread else { return nil }
      return ($0.name, loop)
    } + PerObjectSuite.instructionLoops

  /// The child side: prepare in main context, run one loop on another thread, exit.
  @MainActor
  static func runLoop(named name: String, iterations: Int) -> Never {
    let all = loops + TrackedWaitSuite.instructionLoops
    guard let loop = all.first(where: { $0.name == name })?.loop else {
      FileHandle.standardError.write(Data("unknown loop \(name)\n".utf8))
      exit(64)
    }
    FastPaths.prepareBlocking()
    PerObjectSuite.prepareInstructionLoops()
    KhanPort.onceOnMainThread(FastPaths.khanPredicate) {}  // the main thread, before any run loop
    let done = DispatchSemaphore(value: 0)
    Thread {
      print(loop(iterations))
      done.signal()
    }.start()
    done.wait()
    exit(0)
  }

  static func run(quick: Bool) -> Never {
    let iterations = quick ? 20_000 : 200_000
    guard let binary = strippedCopy() else {
      print("valgrind or strip is missing: install valgrind and binutils")
      exit(1)
    }
    print("Instructions per fast-path call (valgrind --tool=callgrind; \(iterations) and")
    print("\(2 * iterations) calls; the difference per call), on another thread:")
    var baseline: Double?
    for (name, _) in loops {
      let isBaseline = name == Candidate.baselineName
      guard let once = collected(binary, name, iterations),
        let twice = collected(binary, name, 2 * iterations)
      else {
        print("  \(name): callgrind failed")
        continue
      }
      let perCall = Double(twice - once) / Double(iterations)
      if isBaseline { baseline = perCall }
      let ratio = baseline.map { " \(Report.format(perCall / $0, decimals: 2))×" } ?? ""
      print("  \(name): \(Report.format(perCall, decimals: 2))\(ratio)")
    }
    try? FileManager.default.removeItem(atPath: binary)
    exit(0)
  }

  /// Instructions per call of the loop `name`, in `binary` (a ``strippedCopy()``): the
  /// difference between `iterations` and twice as many calls, divided by `iterations`.
  static func perCall(_ binary: String, _ name: String, iterations: Int) -> Double? {
    guard let once = collected(binary, name, iterations),
      let twice = collected(binary, name, 2 * iterations)
    else { return nil }
    return Double(twice - once) / Double(iterations)
  }

  /// Total instructions callgrind collected for one run of a loop.
  private static func collected(_ binary: String, _ name: String, _ iterations: Int) -> Int? {
    collected(binary, ["loop", name, "\(iterations)"])
  }

  /// Total instructions callgrind collected for one run of `binary` with `arguments`.
  static func collected(_ binary: String, _ arguments: [String]) -> Int? {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments =
      ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", binary] + arguments
    let errors = Pipe()
    process.standardError = errors
    process.standardOutput = FileHandle.nullDevice
    guard (try? process.run()) != nil else { return nil }
    let text = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    guard let line = text.split(separator: "\n").first(where: { $0.contains("Collected :") })
    else { return nil }
    return Int(line.split(separator: ":").last!.filter(\.isNumber))
  }

  /// A copy of this executable without debug info, for valgrind; remove it when done.
  static func strippedCopy() -> String? {
    let source = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
    let copy = FileManager.default.temporaryDirectory
      .appendingPathComponent("MainOnceBenchmarks-\(getpid())").path
    guard (try? FileManager.default.copyItem(atPath: source, toPath: copy)) != nil else {
      return nil
    }
    let strip = Process()
    strip.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    strip.arguments = ["strip", "--strip-debug", copy]
    guard (try? strip.run()) != nil else { return nil }
    strip.waitUntilExit()
    return strip.terminationStatus == 0 ? copy : nil
  }
}
