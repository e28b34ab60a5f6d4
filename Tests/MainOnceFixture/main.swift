// A process per scenario: the main queue is process-wide, so each run-loop driver and calling
// context gets a fresh process. Usage: MainOnceFixture <driver> <context>
//
// It prints one line, `PASS …` or `FAIL …`, and exits 0 only on PASS.
import Dispatch
import Foundation
import MainOnceFixtureSupport

let usage =
  "usage: MainOnceFixture dispatchMain|runLoop topLevel|mainBlock|background|nestedSync|mixed|stress\n"
  + "       MainOnceFixture none topLevel\n"
  + "       MainOnceFixture deadlock "
  + DeadlockScenario.allCases.map(\.rawValue).joined(separator: "|") + "\n"
  + "       MainOnceFixture foreignLoop "
  + ForeignLoop.allCases.map(\.rawValue).joined(separator: "|") + "\n"
  + "       MainOnceFixture runLoopTimers "
  + RunLoopTimerScenario.allCases.map(\.rawValue).joined(separator: "|") + "\n"
  + "       MainOnceFixture service "
  + ServiceScenario.allCases.map(\.rawValue).joined(separator: "|") + "\n"
  + "       MainOnceFixture regression "
  + RegressionScenario.allCases.map(\.rawValue).joined(separator: "|") + "\n"
  + "       MainOnceFixture detector "
  + DetectorScenario.allCases.map(\.rawValue).joined(separator: "|") + "\n"
  + "       MainOnceFixture fork "
  + ForkScenario.allCases.map(\.rawValue).joined(separator: "|") + "\n"
  + "       MainOnceFixture barrier "
  + BarrierScenario.allCases.map(\.rawValue).joined(separator: "|") + "\n"
  + "       MainOnceFixture platform "
  + PlatformScenario.allCases.map(\.rawValue).joined(separator: "|") + "\n"
  + "       MainOnceFixture engine "
  + EngineScenario.allCases.map(\.rawValue).joined(separator: "|") + " [dispatchMain|runLoop]"

// Engine soundness scenarios: MainOnceFixture engine <scenario> [dispatchMain|runLoop]
if (3...4).contains(CommandLine.arguments.count), CommandLine.arguments[1] == "engine",
  let scenario = EngineScenario(rawValue: CommandLine.arguments[2])
{
  let driver = CommandLine.arguments.count == 4 ? Driver(rawValue: CommandLine.arguments[3]) : nil
  scenario.run(driver: driver ?? .dispatchMain)
}

if CommandLine.arguments.count == 3, CommandLine.arguments[1] == "foreignLoop",
  let loop = ForeignLoop(rawValue: CommandLine.arguments[2])
{
  loop.run()
}

if CommandLine.arguments.count == 3, CommandLine.arguments[1] == "runLoopTimers",
  let scenario = RunLoopTimerScenario(rawValue: CommandLine.arguments[2])
{
  scenario.run()
}

if CommandLine.arguments.count == 3, CommandLine.arguments[1] == "service",
  let scenario = ServiceScenario(rawValue: CommandLine.arguments[2])
{
  scenario.run()
}

if CommandLine.arguments.count == 3, CommandLine.arguments[1] == "fork",
  let scenario = ForkScenario(rawValue: CommandLine.arguments[2])
{
  scenario.run()
}

if CommandLine.arguments.count == 3, CommandLine.arguments[1] == "barrier",
  let scenario = BarrierScenario(rawValue: CommandLine.arguments[2])
{
  scenario.run()
}

if CommandLine.arguments.count == 3, CommandLine.arguments[1] == "platform",
  let scenario = PlatformScenario(rawValue: CommandLine.arguments[2])
{
  scenario.run()
}

if CommandLine.arguments.count == 3, CommandLine.arguments[1] == "regression",
  let scenario = RegressionScenario(rawValue: CommandLine.arguments[2])
{
  scenario.run()
}

// Where `/proc` is hidden, Swift reads no arguments: `FIXTURE_DETECTOR_SCENARIO` names the
// scenario then.
if let name = CommandLine.arguments.count == 3 && CommandLine.arguments[1] == "detector"
  ? CommandLine.arguments[2] : ProcessInfo.processInfo.environment["FIXTURE_DETECTOR_SCENARIO"],
  let scenario = DetectorScenario(rawValue: name)
{
  scenario.run()
}

if CommandLine.arguments.count == 3, CommandLine.arguments[1] == "deadlock",
  let scenario = DeadlockScenario(rawValue: CommandLine.arguments[2])
{
  scenario.run()
}

guard CommandLine.arguments.count == 3,
  let driver = Driver(rawValue: CommandLine.arguments[1]), driver != .asyncMain,
  let context = CallingContext(rawValue: CommandLine.arguments[2]), context != .mainActor,
  driver != .none || context == .topLevel, driver != .none || context != .stress
else {
  FileHandle.standardError.write(Data((usage + "\n").utf8))
  exit(64)
}

runScenario(driver: driver, context: context)

/// Starts the callers for `context`, then drives the main queue with `driver`.
/// Top-level code is main-actor isolated; this function is not, so its closures can run anywhere.
func runScenario(driver: Driver, context: CallingContext) -> Never {
  if context == .stress {
    Watchdog.start(seconds: Stress.isLong ? 1_100 : 60)
    Stress.startInBackground(driver: driver)
    serveMainQueue(with: driver)
  }
  Watchdog.start(seconds: 20)
  let probe = Probe()
  let callers = DispatchGroup()

  switch context {
  case .topLevel, .mainActor:
    probe.call()
  case .stress:
    fatalError("a stress serves the main queue above and never gets here")
  case .mainBlock:
    probe.callFromMainQueue(group: callers)
  case .background:
    probe.race(threads: 8, group: callers)
  case .nestedSync:
    probe.callFromMainQueue(nestedIn: DispatchQueue(label: "fixture.serial"), group: callers)
  case .mixed:
    probe.race(threads: 8, group: callers)
    probe.callFromMainQueue(group: callers)
    probe.callFromMainQueue(nestedIn: DispatchQueue(label: "fixture.serial"), group: callers)
  }

  if driver == .none {
    callers.wait()
    probe.finish(driver: driver, context: context)
  }
  callers.notify(queue: .global()) { probe.finish(driver: driver, context: context) }
  serveMainQueue(with: driver)
}
