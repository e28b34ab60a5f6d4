import Foundation
import MainOnce
import Synchronization

/// Threads race to use a main-only stack while a run-loop driver serves the main queue.
struct RaceStory {
  enum Driver: String {
    case dispatchMain = "dispatchMain()"
    case runLoop = "RunLoop.main.run()"
    case mainActor = "async code on the main actor"
    case foreignLoop = "a poll loop of its own, with MainQueueDriver"
  }

  let driver: Driver
  let racers = 8

  func start() -> Never {
    let started = ContinuousClock.now
    print("MainOnce demo: \(racers) threads race to use a main-only stack (\(driver.rawValue))")
    let finished = DispatchGroup()
    let earlyReturns = Atomic(0)
    for _ in 0..<racers {
      finished.enter()
      Thread {
        useServices(earlyReturns: earlyReturns)
        finished.leave()
      }.start()
    }
    finished.notify(queue: .global()) { @Sendable in
      report(earlyReturns: earlyReturns.load(ordering: .relaxed), since: started)
    }
    switch driver {
    case .dispatchMain:
      dispatchMain()
    case .runLoop:
      RunLoop.main.run()
      fatalError("RunLoop.main.run() returned")
    case .mainActor:
      Task { @MainActor in
        useServices(earlyReturns: earlyReturns)
      }
      dispatchMain()
    case .foreignLoop:
      // As a GLib, SDL or libuv loop would: wait for the driver's descriptor among others, no
      // longer than until RunLoop.main's next timer is due, and drain when it wakes.
      var events = [pollfd(fd: MainQueueDriver.fileDescriptor, events: Int16(POLLIN), revents: 0)]
      while true {
        _ = poll(&events, 1, MainQueueDriver.timeoutMilliseconds)
        MainQueueDriver.drain()
      }
    }
  }

  private func report(earlyReturns: Int, since started: ContinuousClock.Instant) -> Never {
    let stack = Services.stack.value
    let builds = DemoStack.builds.load(ordering: .relaxed)
    let configurations = Services.loggingConfigurations.load(ordering: .relaxed)
    print(
      "  stack builder ran \(times(builds)), in main context: \(yesNo(stack.builtInMainContext))")
    print(
      "  on the main thread: \(yesNo(stack.builtOnMainThread))"
        + (stack.builtOnMainThread
          ? "" : " (after dispatchMain() a worker thread serves the main queue)"))
    print("  logging configured \(times(configurations))")
    print("  callers that returned before the stack was built: \(earlyReturns)")
    let fastPath = FastPathTiming.measure()
    print(
      "  fast path on a done token: \(fastPath.onceOnMain) ns per call, inlined in a loop"
        + " (Thread.isMainThread alone: \(fastPath.isMainThread) ns)\(FastPathTiming.buildNote)")
    print("done in \(started.duration(to: .now).formatted(.units(allowed: [.milliseconds])))")
    let correct =
      builds == 1 && configurations == 1 && earlyReturns == 0 && stack.builtInMainContext
    exit(correct ? 0 : 1)
  }

  private func times(_ count: Int) -> String { count == 1 ? "once" : "\(count) times" }
  private func yesNo(_ value: Bool) -> String { value ? "yes" : "no" }
}

/// What every racer does: configure logging once, then read the stack.
private func useServices(earlyReturns: borrowing Atomic<Int>) {
  onceOnMain(token: Services.loggingToken) {
    Services.loggingConfigurations.add(1, ordering: .relaxed)
  }
  let stack = Services.stack.value
  if DemoStack.builds.load(ordering: .acquiring) == 0 || stack.fetchCount() != 42 {
    earlyReturns.add(1, ordering: .relaxed)
  }
}
