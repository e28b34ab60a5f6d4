// From the repository's root (the benchmarks are a package of their own, in Benchmarks/):
// swift run -c release --package-path Benchmarks MainOnceBenchmarks [GROUP] [--quick] [--json PATH]
//   GROUP is one of fast-path, objects, sizes, first-call, in-place, race, tracked-waits,
//   run-loop; without one,
//   all of them run, then the speed targets (Targets.swift) are judged, and the JSON goes to
//   MainOnceBenchmarks.json unless --json names another file (a single group writes JSON only
//   when --json is given). Into a file that exists, a run merges: it replaces the groups it
//   measured and keeps the others. Each group records the command, toolchain and machine of
//   the run that measured it, and its targets (BenchmarkRun.GroupRecord).
//   fast-path   done tokens side by side with dispatch_once_f and others; allocations, scaling
//   objects     runOnce(for:)/onceOnMain(for:) on a done call site, one and two threads, memory;
//               what a weak reference costs the object; in a build for tests (-Xswiftc
//               -enable-testing -Xswiftc -DMAINONCE_INSTRUMENTATION), the same on weak loads
//   sizes       MemoryLayout of the once-cells
//   first-call  a fresh token's first call against the bare main.async + semaphore hop, under
//               dispatchMain(), RunLoop.main.run() and MainQueueDriver (a process each), and
//               again with each process on one CPU
//   in-place    a fresh token's and MainLazy's first call in main context, against
//               dispatch_once_f's first call of a fresh predicate; allocations; instructions
//               under valgrind's callgrind (each count runs `in-place-loop`, below)
//   race        eight threads racing on a fresh token against the Khan port, under each driver
//   tracked-waits  tracked waits that do not block beside the plain calls (ns, instructions
//               under valgrind's callgrind, allocations), and with 1, 2 and 16 threads at once
//   run-loop    a program on a real GLib main loop (dlopen), served by MainQueueDriver's source,
//               by a 50 ms tickler that runs a pass of RunLoop.main, and RunLoop.main.run()
//               alone (a process each): latency of main.async and @MainActor work, how late a
//               100 ms Timer fires, idle wake-ups and CPU time
//   The README gives the command with code alignment options that its numbers come from: at
//   1.4 ns a call, a probe that straddles a cache line costs a cycle more.
// swift run -c release --package-path Benchmarks MainOnceBenchmarks instructions [--quick]
//   Instructions per fast-path call, counted by valgrind's callgrind.
// MainOnceBenchmarks in-place-loop KEY CALLS CELLS
//   Of CELLS fresh cells of the in-place variant KEY, the first call of CALLS, on the main
//   thread before dispatchMain(), for callgrind (the in-place group runs it).
// MainOnceBenchmarks profile first-call DRIVER VARIANT [COUNT]
// MainOnceBenchmarks profile race DRIVER onceOnMain|khanPort [RACES]
// MainOnceBenchmarks profile phases DRIVER first-call|race [COUNT]
//   One variant alone, after a warm-up, for tools that measure a whole process (strace -c -f,
//   perf stat, valgrind); see Profile.swift. --one-cpu keeps every thread on one CPU.
import Dispatch
import Foundation

let arguments = Array(CommandLine.arguments.dropFirst())
let quick = arguments.contains("--quick")
/// For a driver process: every thread on one CPU.
let oneCPU = arguments.contains("--one-cpu")
let jsonPath = arguments.firstIndex(of: "--json").map { index in
  arguments.indices.contains(index + 1) ? arguments[index + 1] : ""
}
// The words that are neither options nor the value of --json.
let words = arguments.indices.filter { index in
  !arguments[index].hasPrefix("--") && (index == 0 || arguments[index - 1] != "--json")
}.map { arguments[$0] }

func usage() -> Never {
  FileHandle.standardError.write(
    Data(
      """
      usage: MainOnceBenchmarks [fast-path|objects|sizes|first-call|in-place|race|tracked-waits|
                                 run-loop]
                                [--quick]
                                [--json PATH]
             MainOnceBenchmarks instructions [--quick]
             MainOnceBenchmarks in-place-loop KEY CALLS CELLS
             MainOnceBenchmarks profile first-call DRIVER VARIANT [COUNT]
             MainOnceBenchmarks profile race DRIVER onceOnMain|khanPort [RACES]
             MainOnceBenchmarks profile phases DRIVER first-call|race [COUNT]
      DRIVER: \(DriverProcess.drivers.joined(separator: ", "))
      VARIANT: \(FirstCalls.variants.map(\.key).joined(separator: ", "))

      """.utf8))
  exit(64)
}

switch words.first {
case "child" where words.count == 3 && words[1] == "first-call":
  let driver = words[2]
  DriverProcess.serve(driver: driver) {
    FirstCalls.measure(driver: driver, quick: quick, oneCPU: oneCPU)
  }
case "child" where words.count == 3 && words[1] == "race":
  let driver = words[2]
  DriverProcess.serve(driver: driver) { Races.measure(driver: driver, quick: quick) }
case "child" where words.count == 3 && words[1] == "run-loop":
  let server = words[2]
  DriverProcess.serve(driver: server) { RunLoopServing.measure(server: server, quick: quick) }
case "child" where words.count == 4 && words[1] == "objects-memory":
  let form = words[3]
  DriverProcess.serve(driver: words[2]) {
    PerObjectSuite.measureMemory(of: form, count: quick ? 1_000 : 10_000)
  }
case "profile" where words.count >= 4:
  Profile.run(
    group: words[1], driver: words[2], variant: words[3],
    count: words.count > 4 ? Int(words[4]) : nil)
case "in-place-loop" where words.count == 4:
  InPlaceFirstCalls.runLoop(key: words[1], calls: Int(words[2]) ?? 0, cells: Int(words[3]) ?? 0)
case "loop" where words.count >= 3:
  InstructionCounts.runLoop(named: words[1], iterations: Int(words[2]) ?? 0)
case "instructions":
  InstructionCounts.run(quick: quick)
case let word where jsonPath != "" && words.count <= 1:
  let groups: [BenchmarkRun.Group]
  if let word {
    guard let group = BenchmarkRun.Group(rawValue: word) else { usage() }
    groups = [group]
  } else {
    groups = BenchmarkRun.Group.allCases
  }
  let path = jsonPath ?? (word == nil ? "MainOnceBenchmarks.json" : nil)
  Task { @MainActor in
    await BenchmarkRun(groups: groups, quick: quick, jsonPath: path).run()
    exit(0)
  }
  dispatchMain()
default:
  usage()
}
