// The async-main driver: `@main` with `async` serves the main queue after its first suspension.
// Usage: MainOnceAsyncFixture topLevel|mainActor|background|nestedSync|mixed
import Dispatch
import Foundation
import MainOnceFixtureSupport

@main
struct AsyncMain {
  static func main() async {
    // The engine stress (see EngineStress): MainOnceAsyncFixture engineStress
    if CommandLine.arguments.count == 2, CommandLine.arguments[1] == "engineStress" {
      Watchdog.start(seconds: EngineStress.watchdogSeconds)
      EngineStress.startInBackground(driver: .asyncMain)
      try? await Task.sleep(for: .seconds(3_600))
    }
    guard CommandLine.arguments.count == 2,
      let context = CallingContext(rawValue: CommandLine.arguments[1]), context != .mainBlock
    else {
      FileHandle.standardError.write(
        Data(
          "usage: MainOnceAsyncFixture topLevel|mainActor|background|nestedSync|mixed|stress|engineStress\n"
            .utf8
        ))
      exit(64)
    }
    Watchdog.start(seconds: context == .stress ? (Stress.isLong ? 1_100 : 60) : 20)
    let probe = Probe()
    let serial = DispatchQueue(label: "fixture.serial")
    let callers = DispatchGroup()

    switch context {
    case .topLevel:
      probe.call()
    case .mainActor:
      await Task.yield()
      probe.callFromMainActor()
    case .background:
      probe.race(threads: 8, group: callers)
    case .nestedSync:
      await Task.yield()
      probe.callFromMainActor(nestedIn: serial)
    case .mixed:
      probe.race(threads: 8, group: callers)
      await Task.yield()
      probe.callFromMainActor()
      probe.callFromMainActor(nestedIn: serial)
    case .stress:
      Stress.startInBackground(driver: .asyncMain)
      try? await Task.sleep(for: .seconds(3_600))
    case .mainBlock:
      fatalError("rejected above")
    }
    await withCheckedContinuation { done in
      callers.notify(queue: .global()) { @Sendable in done.resume() }
    }
    probe.finish(driver: .asyncMain, context: context)
  }
}
