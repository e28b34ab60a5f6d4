// swift run -c release MainOnceBenchmarks [--quick] [--json PATH]
//   Fast paths side by side, first calls and racing callers under dispatchMain() and
//   RunLoop.main.run(), allocations, scaling; prints a table and writes JSON. The README gives
//   the command with code alignment options that its numbers come from: at 1.4 ns a call, a
//   probe that straddles a cache line costs a cycle more.
// swift run -c release MainOnceBenchmarks instructions [--quick]
//   Instructions per fast-path call, counted by valgrind's callgrind.
import Dispatch
import Foundation

let arguments = Array(CommandLine.arguments.dropFirst())
let quick = arguments.contains("--quick")
let jsonPath = arguments.firstIndex(of: "--json").map { index in
  arguments.indices.contains(index + 1) ? arguments[index + 1] : ""
}
// The command is the first argument that is neither an option nor the value of --json.
let command = arguments.indices.first { index in
  !arguments[index].hasPrefix("--") && (index == 0 || arguments[index - 1] != "--json")
}.map { arguments[$0] }

switch command {
case "first-call" where arguments.count >= 2:
  FirstCallProcess.run(driver: arguments[1], quick: quick)
case "loop" where arguments.count >= 3:
  InstructionCounts.runLoop(named: arguments[1], iterations: Int(arguments[2]) ?? 0)
case "instructions":
  InstructionCounts.run(quick: quick)
case nil where jsonPath != "":
  Task { @MainActor in
    await BenchmarkRun(quick: quick, jsonPath: jsonPath ?? "MainOnceBenchmarks.json").run()
    exit(0)
  }
  dispatchMain()
default:
  FileHandle.standardError.write(
    Data(
      """
      usage: MainOnceBenchmarks [--quick] [--json PATH]
             MainOnceBenchmarks instructions [--quick]

      """.utf8))
  exit(64)
}
