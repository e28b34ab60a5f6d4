import Dispatch
import Foundation
import MainOnce
import MainOnceFixtureSupport
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// Reproductions of bugs in deadlock detection and in self-awaiting builders, written as a user
/// would write them:
/// `MainOnceFixture regression <scenario>`. Run by `RegressionTests`, which says what each must
/// do; on the code before the fixes, each did something else (hangs, stops a
/// healthy program, traps without a message, crashes).
///
/// Every scenario is bounded by a watchdog on a thread of its own (never a libdispatch worker:
/// some scenarios block every one of those), which prints `FAIL timed out after N s` and exits
/// with status 3; `FIXTURE_TIMEOUT` overrides its limit. Every bound is scaled (``TimeScale``). Markers go to standard output at once
/// (unbuffered), so that they survive a crash that follows.
enum RegressionScenario: String, CaseIterable {
  // MARK: Builders that await their own value

  /// An `AsyncMainLazy` builder awaits its own value through `async let`: a structured
  /// child of the build, which the build waits for, so it can never be served.
  case asyncLazyAsyncLetAwaitsItself
  /// The same through a task-group child.
  case asyncLazyTaskGroupAwaitsItself

  // MARK: Deadlock detection

  /// Main-queue code runs `withTrackedWait(for: work) { sem.wait(); usleep(500_000) }`;
  /// the worker performing `work` signals `sem`, then calls `onceOnMain` on a fresh token. The
  /// main queue's thread sleeps in the body after its wait is over: the program recovers.
  case trackedWaitBodySleepsAfterItsWait
  /// `withTrackedWait(for: work) { sem.wait(timeout: .now() + 0.5) }` while the worker
  /// performing `work` calls `onceOnMain`: the body's wait ends by itself.
  case trackedWaitBodyWithDeadline
  /// Two loaders read a `MainLazy` whose builder sleeps 300 ms (I/O); main-queue code
  /// waits for both with `group.wait(for:)`. Run under `service`: the first loader arrives once
  /// main-queue code waits, which then runs the builder in place, nested in its wait; the second
  /// arrives while it does.
  case serviceSlowLazyTwoLoaders
  /// Rounds of three workers performing one work item, each calling `onceOnMain` on the
  /// same four fresh tokens, while main-queue code waits for them with `group.wait(for:)`. Run
  /// under `service`. `REGRESSION_ROUNDS` sets the number of rounds (default 200).
  case serviceWorkersManyTokens
  /// 32 `DispatchQueue.global()` blocks block for good (the pool runs a few; the rest
  /// wait in the global queue); main-queue code then waits in `semaphore.wait(for:)` for a
  /// thread that signals after 200 ms. Run under `service`.
  case serviceSemaphoreWithBusyPool
  /// The same with `group.wait(for:)`.
  case serviceGroupWithBusyPool
  /// Main-queue code waits in `semA.wait(for: A)`; T1 performs A inside
  /// `withTrackedWait(for: B) { compute; semB.wait() }`; at 50 ms W, performing B, calls
  /// `onceOnMain`, then signals `semB`. Run under `service`: the cycle becomes provable only
  /// once T1 blocks, after at least 300 ms, and after the watchdog has reported W's wait.
  case serviceLateProof
  /// With a 1 ms stall timeout and the main queue held by sleeping code, async callers of
  /// one token keep arriving and being cancelled while other threads keep MainOnce busy: the
  /// watchdog keeps looking at a gate whose callers come and go. Runs 6 s
  /// (`REGRESSION_SECONDS`).
  case watchdogWithCallersComingAndGoing
  /// The report handler reads a fresh `MainLazy` (a logger), which needs the main queue;
  /// the main queue is blocked for good in a raw semaphore wait while a thread waits for an
  /// initializer. Run with `MAINONCE_DEADLOCK=abort MAINONCE_STALL_TIMEOUT=0.3`.
  case reportHandlerNeedsMainQueue
  /// `queue.trackedSync` from main-queue code, on a queue that targets the main queue.
  case trackedSyncOnQueueTargetingMain
  /// `q2.trackedSync` inside a block on q1, where q2 targets q1.
  case trackedSyncOnQueueTargetingHeldQueue
  /// Run with `MAINONCE_QUEUE_INTROSPECTION=off`: a `q.async` block calls `onceOnMain` on
  /// a fresh token; main-queue code then waits for q with `q.trackedSync`. A real cycle.
  case fallbackTrackedSyncCycle

  func run() -> Never {
    let limit = ProcessInfo.processInfo.environment["FIXTURE_TIMEOUT"].flatMap { Int($0) }
    startTimeLimit(seconds: limit ?? 15)
    switch self {
    case .asyncLazyAsyncLetAwaitsItself, .asyncLazyTaskGroupAwaitsItself:
      let declared =
        self == .asyncLazyAsyncLetAwaitsItself
        ? SelfAwaiting.asyncLetLine : SelfAwaiting.taskGroupLine
      say("DECLARED MainOnceFixture/RegressionScenarios.swift:\(declared)")
      let scenario = self
      Task.detached {
        let value =
          scenario == .asyncLazyAsyncLetAwaitsItself
          ? try await SelfAwaiting.viaAsyncLet.get() : try await SelfAwaiting.viaTaskGroup.get()
        verdict(true, "the builder finished with \(value)")
      }
    case .trackedWaitBodySleepsAfterItsWait, .trackedWaitBodyWithDeadline:
      runTrackedWaitBodyThatRecovers(withDeadline: self == .trackedWaitBodyWithDeadline)
    case .serviceSlowLazyTwoLoaders:
      runSlowLazyTwoLoaders()
    case .serviceWorkersManyTokens:
      runWorkersManyTokens()
    case .serviceSemaphoreWithBusyPool, .serviceGroupWithBusyPool:
      runServicedWaitWithBusyPool(group: self == .serviceGroupWithBusyPool)
    case .serviceLateProof:
      runLateProof()
    case .watchdogWithCallersComingAndGoing:
      runWatchdogWithCallersComingAndGoing()
    case .reportHandlerNeedsMainQueue:
      runReportHandlerNeedingMainQueue()
    case .trackedSyncOnQueueTargetingMain:
      let queue = DispatchQueue(label: "regression.targets-main", target: .main)
      DispatchQueue.main.async {
        say("CALLSITE MainOnceFixture/RegressionScenarios.swift:\(#line + 1)")
        queue.trackedSync {}
        verdict(true, "trackedSync returned")
      }
    case .trackedSyncOnQueueTargetingHeldQueue:
      let outer = DispatchQueue(label: "regression.q1")
      let inner = DispatchQueue(label: "regression.q2", target: outer)
      outer.async {
        say("CALLSITE MainOnceFixture/RegressionScenarios.swift:\(#line + 1)")
        inner.trackedSync {}
        verdict(true, "trackedSync returned")
      }
    case .fallbackTrackedSyncCycle:
      runFallbackTrackedSyncCycle()
    }
    dispatchMain()
  }
}

// MARK: - A builder that awaits its own value

/// `AsyncMainLazy` values whose builders await their own value through a child task.
private enum SelfAwaiting {
  static let asyncLetLine = #line + 1
  static let viaAsyncLet: AsyncMainLazy<Int> = AsyncMainLazy {
    async let inner = SelfAwaiting.viaAsyncLet.get()
    return try await inner + 1
  }

  static let taskGroupLine = #line + 1
  static let viaTaskGroup: AsyncMainLazy<Int> = AsyncMainLazy {
    try await withThrowingTaskGroup(of: Int.self) { group in
      group.addTask { try await SelfAwaiting.viaTaskGroup.get() }
      return try await group.next()! + 1
    }
  }
}

// MARK: - A tracked wait that ends by itself

private enum RecoveringTokens {
  static let loader = MainOnceToken("loader")
}

/// Main-queue code in a tracked wait whose body sleeps after the wait ended, or waits with a
/// deadline, while the worker it waits for needs the main queue: the body returns, the main
/// queue runs the worker's initializer, and the program ends normally.
private func runTrackedWaitBodyThatRecovers(withDeadline: Bool) {
  let work = WaitTarget.work("loader")
  let signal = DispatchSemaphore(value: 0)
  let workerDone = DispatchSemaphore(value: 0)
  DispatchQueue.main.async {
    let mainQueueThread = KernelThread.current
    Thread {
      work.perform {
        // Once the main queue's thread sleeps in its tracked wait.
        _ = waitUntil { KernelThread.isAsleep(mainQueueThread) }
        if !withDeadline { signal.signal() }
        onceOnMain(token: RecoveringTokens.loader) {}
      }
      workerDone.signal()
    }.start()
    withTrackedWait(for: work) {
      if withDeadline {
        _ = signal.wait(timeout: .now() + 0.5)
      } else {
        signal.wait()
        usleep(500_000)  // after the wait: logging, a contended lock, a page fault
      }
    }
    say("the tracked wait returned")
    Thread {
      let finished = workerDone.wait(timeout: .now() + TimeScale.seconds(10)) == .success
      verdict(finished, "the main queue's tracked wait and the worker finished: \(finished)")
    }.start()
  }
}

// MARK: - An initializer run in place, nested in a serviced wait

/// A value whose builder does 300 ms of I/O.
private enum SlowLazies {
  /// Signalled as the builder starts.
  static let building = DispatchSemaphore(value: 0)
  static let configuration = MainLazy { () -> Int in
    building.signal()
    usleep(300_000)
    return 42
  }
}

private func runSlowLazyTwoLoaders() {
  let loaders = WaitTarget.work("loaders")
  DispatchQueue.main.async {
    let group = DispatchGroup()
    let values = Atomic(0)
    let mainQueueThread = KernelThread.current
    for index in 0..<2 {
      group.enter()
      Thread {
        if index == 0 {
          // Once main-queue code sleeps in `group.wait(for:)`.
          _ = waitUntil { KernelThread.isAsleep(mainQueueThread) }
        } else {
          // Arrives while main-queue code runs the builder for the first, nested in its wait.
          _ = SlowLazies.building.wait(timeout: .now() + TimeScale.seconds(5))
          usleep(20_000)
        }
        loaders.perform { values.add(SlowLazies.configuration.value, ordering: .relaxed) }
        group.leave()
      }.start()
    }
    group.wait(for: loaders)
    let sum = values.load(ordering: .relaxed)
    verdict(sum == 84, "the group wait ended; the loaders read \(sum)")
  }
}

private func runWorkersManyTokens() {
  let rounds =
    ProcessInfo.processInfo.environment["REGRESSION_ROUNDS"].flatMap { Int($0) } ?? 200
  serviceRound(0, of: rounds)
}

/// One round: three workers performing one work item, each calling the same four fresh tokens,
/// while main-queue code waits for them; then the next round, from a fresh main-queue block.
private func serviceRound(_ round: Int, of rounds: Int) {
  guard round < rounds else { verdict(true, "\(rounds) rounds") }
  let tokens = TokenBuffer(count: 4)
  let work = WaitTarget.work("workers")
  DispatchQueue.main.async {
    let group = DispatchGroup()
    for _ in 0..<3 {
      group.enter()
      Thread {
        work.perform {
          for index in 0..<4 { onceOnMain(token: tokens[index]) {} }
        }
        group.leave()
      }.start()
    }
    group.wait(for: work)
    for index in 0..<4 where !tokens.isDone(at: index) {
      verdict(false, "round \(round): token \(index) is not done after the wait")
    }
    serviceRound(round + 1, of: rounds)
  }
}

// MARK: - A serviced wait while every libdispatch worker is blocked

private func runServicedWaitWithBusyPool(group: Bool) {
  // Blocks for the rest of the process: the pool's threads are taken.
  let never = DispatchSemaphore(value: 0)
  let started = DispatchSemaphore(value: 0)
  for _ in 0..<32 {
    DispatchQueue.global().async {
      started.signal()
      never.wait()
    }
  }
  // libdispatch starts a thread per core at once and, on Linux, adds about one a second for
  // blocked blocks: the rest stay queued, ahead of anything submitted after them.
  let first = started.wait(timeout: .now() + TimeScale.seconds(5)) == .success
  say("32 global blocks submitted; the first is blocked: \(first)")
  let signaller = WaitTarget.work("signaller")
  DispatchQueue.main.async {
    let semaphore = DispatchSemaphore(value: 0)
    let done = DispatchGroup()
    done.enter()
    Thread {
      signaller.perform {
        usleep(200_000)
        semaphore.signal()
        done.leave()
      }
    }.start()
    let start = ContinuousClock.now
    if group { done.wait(for: signaller) } else { semaphore.wait(for: signaller) }
    let elapsed = ContinuousClock.now - start
    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    verdict(true, "the wait ended after=\(String(format: "%.2f", seconds))")
  }
}

// MARK: - A cycle provable only late

private enum LateProof {
  static let token = MainOnceToken("late proof")
  /// Set once the watchdog has reported a stall: MainOnce has long given up proving the cycle.
  static let stallReported = Atomic(false)
  /// Set once W's call has returned: the cycle was served after all.
  static let served = Atomic(false)
}

private func runLateProof() {
  DeadlockDetection.reportHandler = { report in
    FileHandle.standardError.write(Data((report.text + "\n").utf8))
    if report.kind == .stall { LateProof.stallReported.store(true, ordering: .relaxed) }
  }
  let taskA = WaitTarget.work("A")
  let taskB = WaitTarget.work("B")
  let semA = DispatchSemaphore(value: 0)
  let semB = DispatchSemaphore(value: 0)
  DispatchQueue.main.async {
    Thread {
      taskA.perform {
        withTrackedWait(for: taskB) {
          // Computes (a thread that runs proves no cycle) for at least 300 ms, and on until the
          // cycle W closes was served or the watchdog has reported W's wait: by then MainOnce
          // has stopped trying to prove the cycle, however loaded the machine. At most 5 s
          // (scaled).
          let start = ContinuousClock.now
          while ContinuousClock.now - start < .milliseconds(300)
            || !LateProof.stallReported.load(ordering: .relaxed)
              && !LateProof.served.load(ordering: .relaxed)
              && ContinuousClock.now - start < .seconds(5).scaled
          {}
          semB.wait()
        }
      }
      semA.signal()
    }.start()
    Thread {
      taskB.perform {
        usleep(50_000)
        onceOnMain(token: LateProof.token) {}
        LateProof.served.store(true, ordering: .relaxed)
        semB.signal()
      }
    }.start()
    semA.wait(for: taskA)
    verdict(LateProof.token.isDone, "the main queue's wait ended")
  }
}

// MARK: - The watchdog while callers come and go

private enum WatchdogTokens {
  static let token = MainOnceToken("callers coming and going")
}

/// How long the watchdog scenario runs: `REGRESSION_SECONDS`, 6 by default.
private var watchdogScenarioDuration: Duration {
  let seconds =
    ProcessInfo.processInfo.environment["REGRESSION_SECONDS"].flatMap { Double($0) } ?? 6
  return .milliseconds(Int(seconds * 1_000))
}

/// A stall timeout of 1 ms. Main-queue code sleeps, 1 ms at a time, so the watchdog keeps
/// looking at the gate every stall timeout without ever finding it stuck. Three threads keep
/// starting tasks that await one token, cancelling each after 75 to 375 µs (every 50th after
/// 2 ms more, so that some caller is old enough for a first look); in the first 2 ms of every
/// 20 ms they start none, so that the gate's queue empties and fills again. Three more threads
/// keep performing tracked work, so that MainOnce's lock is busy and the machine loaded. The
/// watchdog then often takes its look when every caller it sees arrived after it read the clock.
private func runWatchdogWithCallersComingAndGoing() {
  DeadlockDetection.stalls = .report(after: .milliseconds(1))
  let reports = Atomic(0)
  // Counted, not printed: there are hundreds.
  DeadlockDetection.reportHandler = { _ in reports.add(1, ordering: .relaxed) }
  let start = ContinuousClock.now
  let end = start + watchdogScenarioDuration
  DispatchQueue.main.async {
    while ContinuousClock.now < end + .seconds(1) { usleep(1_000) }
  }
  let busy = WaitTarget.work("busy")
  for _ in 0..<3 {
    Thread {
      while ContinuousClock.now < end {
        for _ in 0..<256 { busy.perform {} }
      }
    }.start()
  }
  let callers = DispatchGroup()
  for caller in 0..<3 {
    callers.enter()
    Thread {
      var round = 0
      while ContinuousClock.now < end {
        let elapsed = (ContinuousClock.now - start).components
        let milliseconds = elapsed.seconds * 1_000 + elapsed.attoseconds / 1_000_000_000_000_000
        if milliseconds % 20 < 2 {
          usleep(500)
          continue
        }
        let task = Task.detached { _ = try? await onceOnMain(token: WatchdogTokens.token) {} }
        if round % 50 == 0 { usleep(2_000) }
        usleep(UInt32(75 + (round * 37 + caller * 101) % 300))
        task.cancel()
        round += 1
      }
      callers.leave()
    }.start()
  }
  Thread {
    _ = callers.wait(timeout: .now() + TimeScale.seconds(60))
    verdict(true, "the watchdog kept looking; reports=\(reports.load(ordering: .relaxed))")
  }.start()
}

// MARK: - A report handler that needs the main queue

/// A logger built on the main queue, as a `MainLazy` often is.
private final class ReportLog: Sendable {
  func write(_ report: DeadlockReport) {
    let firstLine = report.text.prefix(while: { $0 != "\n" })
    say("HANDLER \(report.kind) \(firstLine)")
  }
}

private enum Logging {
  static let log = MainLazy { ReportLog() }
}

private enum HandlerTokens {
  static let token = MainOnceToken("handler scenario")
}

private func runReportHandlerNeedingMainQueue() {
  DeadlockDetection.reportHandler = { report in Logging.log.value.write(report) }
  let never = DispatchSemaphore(value: 0)
  DispatchQueue.main.async {
    Thread {
      onceOnMain(token: HandlerTokens.token) {}
      verdict(true, "the initializer ran")
    }.start()
    never.wait()  // a raw wait: the main queue is blocked for good
  }
}

// MARK: - Reports without queue introspection

private enum FallbackTokens {
  static let token = MainOnceToken("fallback store")
}

private func runFallbackTrackedSyncCycle() {
  let store = DispatchQueue(label: "regression.store")
  DispatchQueue.main.async {
    say("introspection exact=\(MainContext.isExact)")
    store.async {
      onceOnMain(token: FallbackTokens.token) {}
      say("the block on the store queue returned")
    }
    _ = waitUntilParked()  // the store queue's block waits for the initializer
    say("CALLSITE MainOnceFixture/RegressionScenarios.swift:\(#line + 1)")
    store.trackedSync {}
    verdict(true, "the cycle went unnoticed, and trackedSync returned")
  }
}

// MARK: - Support

/// Writes `line` to standard output at once, unbuffered, so that it survives a crash.
private func say(_ line: String) {
  FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// Ends the process with `FAIL timed out after N s`, status 3, after `seconds` (scaled): on a
/// thread of its own, since some scenarios leave no libdispatch worker free.
private func startTimeLimit(seconds: Int) {
  let limit = TimeScale.seconds(Double(seconds))
  Thread {
    Thread.sleep(forTimeInterval: limit)
    say("FAIL timed out after \(String(format: "%g", limit)) s")
    exit(3)
  }.start()
}

/// Keeps the calling thread busy computing for `duration`.
private func spin(for duration: Duration) {
  let end = ContinuousClock.now + duration
  var spins = 0
  while ContinuousClock.now < end { spins &+= 1 }
}
