import Dispatch
import Foundation
import MainOnceFixtureSupport
import Synchronization

@testable import MainOnce

/// Scenarios for the deadlock detector: `MainOnceFixture deadlock <scenario>`.
/// Those that end print `PASS …`; those that MainOnce must stop never print it.
enum DeadlockScenario: String, CaseIterable {
  /// Main-queue code waits for a serial queue whose work then calls `onceOnMain`.
  case trackedCycleMainFirst
  /// A serial queue's work blocks in `onceOnMain`; then main-queue code waits for the queue.
  case trackedCycleWorkerFirst
  /// Like `trackedCycleMainFirst`, but the main queue's thread computes for 60 ms inside its
  /// tracked wait before it blocks: the cycle is proven once it sleeps there.
  case trackedCycleMainRunsFirst
  /// Like `trackedCycleMainRunsFirst`, but the work blocks first: the main queue's wait closes
  /// the cycle while its thread computes, and proves it once that thread sleeps.
  case trackedCycleMainRunsAndCloses
  /// Main-queue code computes for 400 ms inside a tracked wait for work that needs the main
  /// queue, then returns: a thread that never sleeps in its wait proves no cycle.
  case runningTrackedWait
  /// Like `runningTrackedWait`, but the work blocks first, so the main queue's wait closes the
  /// cycle.
  case runningTrackedWaitCloses
  /// `DispatchQueue.main.trackedSync` from main-queue code.
  case mainQueueSyncFromMain
  /// Main-queue code blocks in a raw semaphore wait for 3 s while a thread waits for it.
  ///
  /// Every length here is scaled (``TimeScale``): each is how long a state lasts for the
  /// watchdog to find it, which takes longer on a loaded machine.
  case rawSemaphore
  /// The main thread blocks for 3 s before it ever serves the main queue.
  case neverServed
  /// A main-queue block computes for 2.5 s while a thread waits for the main queue.
  case busyMain
  /// The main thread sleeps 1.5 s, then calls `dispatchMain()`.
  case sleepingMain
  /// As `busyMain`, with eight callers that write a line to standard error the moment they
  /// return: the watchdog's word that the stall ended must come first.
  case stallEndedBeforeCallerGoesOn
  /// Main-queue code waits for work that does not need the main queue: no cycle.
  case unrelatedTrackedWait
  /// A `sync` nested in a main-queue block, without queue introspection: the hop can never
  /// start. A report handler prints the report and ends the process.
  case nestedSyncWithoutIntrospection
  /// A cycle delivered to a report handler, which must still stop the process.
  case cycleToHandler
  /// Like `rawSemaphore`, under `RunLoop.main.run()`: the main queue is served, and stuck.
  case rawSemaphoreUnderRunLoop
  /// The main thread waits 1.6 s in an event loop of its own (`poll`), then calls
  /// `dispatchMain()`.
  case idleEventLoop
  /// A main-queue block computes for 1.5 s, then blocks in a raw semaphore wait for 5 s.
  case busyThenBlocked
  /// An initializer sleeps 1.8 s while its caller and another thread wait for it; a
  /// `runOnce(for:)` body does the same beside it. The watchdog looks once all three wait.
  case slowInitializer
  /// `rawSemaphore` with an abort policy, a 300 ms stall timeout and a report handler, all set
  /// in code.
  case configuredInCode
  /// Main-queue code waits for a worker with a deadline (a semaphore, then a group) while the
  /// worker waits for an initializer: no deadlock, since the waits end by themselves.
  case timedTrackedWaits
  /// A worker signals, then needs the main queue; main-queue code then waits for its signal, as
  /// a tracked wait: the semaphore is signalled already, so the wait returns at once.
  case signalledTrackedWait
  /// 400 rounds: main-queue code blocks in a tracked wait for a worker (its thread, or its
  /// work), which signals and at once calls `onceOnMain` on a fresh token, before the main
  /// queue's thread has woken up and taken its wait off the graph: no deadlock.
  case releasedTrackedWait
  /// Main-queue code consumes 300 items from a producer, one every 10 ms, mostly blocked in a
  /// semaphore, while a worker waits for the main queue: a main queue that makes progress.
  case progressingMainQueue
  /// `await onceOnMain` on a main queue that is never served.
  case neverServedAsync
  /// The completion form on a main queue that is never served.
  case neverServedCompletion
  /// `AsyncMainLazy` on a main queue that is never served.
  case neverServedAsyncLazy
  /// The main thread serves the main queue in `RunLoop.main.run(until:)`, then blocks 3 s in a
  /// semaphore while a worker waits for it.
  case servedThenBlocked
  /// 64 threads wait for one initializer that sleeps 2.5 s. The watchdog looks once all wait.
  case manyWaiters
  /// A stall timeout of an hour is lowered to 100 ms in code while a caller waits.
  case loweredStallTimeout
  /// A token's initializer, on the main queue, waits (tracked) for a serial queue whose work
  /// waits for the token without initializing it.
  case waitCycle
  /// A thread waits 2.5 s for a token nobody initializes; then the main thread initializes it.
  case waitWithoutInitializer
  /// A task waits 2.5 s for an `AsyncMainLazy` nobody builds; then another task builds it.
  case asyncLazyWaitWithoutBuild

  enum Tokens {
    static let token = MainOnceToken("deadlock scenario")
    static let lazy = AsyncMainLazy { 42 }
  }

  func run() -> Never {
    let limit = ProcessInfo.processInfo.environment["FIXTURE_TIMEOUT"].flatMap { Int($0) }
    Watchdog.start(seconds: limit ?? 20)
    switch self {
    case .trackedCycleMainFirst, .cycleToHandler:
      if self == .cycleToHandler {
        DeadlockDetection.reportHandler = printHeadline
      }
      let loader = DispatchQueue(label: "loader")
      let done = DispatchSemaphore(value: 0)
      DispatchQueue.main.async {
        let mainQueueThread = KernelThread.current
        loader.async {
          // Once the main queue's thread sleeps in its wait (bounded: if it never does, the
          // test finds no report).
          _ = waitUntil { KernelThread.isAsleep(mainQueueThread) }
          onceOnMain(token: Tokens.token) {}
          done.signal()
        }
        done.wait(for: .queue(loader))
        verdict(true, "the cycle went unnoticed")
      }
    case .trackedCycleWorkerFirst:
      let loader = DispatchQueue(label: "loader")
      let done = DispatchSemaphore(value: 0)
      DispatchQueue.main.async {
        loader.async {
          onceOnMain(token: Tokens.token) {}
          done.signal()
        }
        _ = waitUntilParked()  // the worker is blocked in its hop
        // The moment the cycle closes, for a measurement of how soon it is stopped.
        FileHandle.standardOutput.write(Data("CLOSING\n".utf8))
        done.wait(for: .queue(loader))
        verdict(true, "the cycle went unnoticed")
      }
    case .trackedCycleMainRunsFirst, .trackedCycleMainRunsAndCloses, .runningTrackedWait,
      .runningTrackedWaitCloses:
      let loader = WaitTarget.work("loader")
      let never = DispatchSemaphore(value: 0)
      DispatchQueue.main.async {
        Thread { loader.perform { onceOnMain(token: Tokens.token) {} } }.start()
        if self == .trackedCycleMainRunsAndCloses || self == .runningTrackedWaitCloses {
          _ = waitUntilParked()  // the worker is blocked in its hop
        }
        withTrackedWait(for: loader) {
          if self == .runningTrackedWait || self == .runningTrackedWaitCloses {
            compute(for: .milliseconds(400))
          } else {
            compute(for: .milliseconds(60))
            never.wait()
          }
        }
        DispatchQueue.global().async { callAndFinish() }
      }
    case .mainQueueSyncFromMain:
      DispatchQueue.main.async {
        DispatchQueue.main.trackedSync {}
        verdict(true, "main-queue sync from the main queue returned")
      }
    case .rawSemaphore:
      let never = DispatchSemaphore(value: 0)
      DispatchQueue.main.async {
        Thread { callAndFinish() }.start()
        _ = never.wait(timeout: .now() + TimeScale.seconds(3))
      }
    case .neverServed:
      Thread { callAndFinish() }.start()
      _ = DispatchSemaphore(value: 0).wait(timeout: .now() + TimeScale.seconds(3))
    case .busyMain:
      DispatchQueue.main.async {
        Thread { callAndFinish() }.start()
        compute(for: .milliseconds(2_500).scaled)
      }
    case .stallEndedBeforeCallerGoesOn:
      DispatchQueue.main.async {
        let returned = DispatchGroup()
        for _ in 0..<8 {
          returned.enter()
          Thread {
            onceOnMain(token: DeadlockScenario.Tokens.token) {}
            FileHandle.standardError.write(Data("CALLER returned\n".utf8))
            returned.leave()
          }.start()
        }
        compute(for: .milliseconds(2_000).scaled)
        returned.notify(queue: .main) { verdict(true, "the callers returned") }
      }
    case .sleepingMain:
      Thread { callAndFinish() }.start()
      usleep(TimeScale.microseconds(1_500_000))
    case .unrelatedTrackedWait:
      let compute = WaitTarget.work("compute")
      let done = DispatchSemaphore(value: 0)
      DispatchQueue.main.async {
        Thread { callAndFinish() }.start()
        Thread {
          compute.perform { usleep(500_000) }
          done.signal()
        }.start()
        done.wait(for: compute)
      }
    case .rawSemaphoreUnderRunLoop:
      let never = DispatchSemaphore(value: 0)
      DispatchQueue.main.async {
        Thread { callAndFinish() }.start()
        _ = never.wait(timeout: .now() + TimeScale.seconds(2.5))
      }
      RunLoop.main.run()
    case .idleEventLoop:
      Thread { callAndFinish() }.start()
      // An event loop that is not Dispatch's (as GLib's or libuv's would be): it waits in poll
      // for input that never comes, and does not serve the main queue meanwhile.
      idleInPoll(milliseconds: Int32(TimeScale.seconds(1.6) * 1_000))
    case .busyThenBlocked:
      let never = DispatchSemaphore(value: 0)
      DispatchQueue.main.async {
        Thread { callAndFinish() }.start()
        compute(for: .milliseconds(1_500).scaled)
        _ = never.wait(timeout: .now() + TimeScale.seconds(5))
      }
    case .slowInitializer:
      let running = DispatchSemaphore(value: 0)
      let bodyRunning = DispatchSemaphore(value: 0)
      let looking = lookOnceParked(3)
      Thread {
        onceOnMain(token: Tokens.token) {
          running.signal()
          takeTime(afterLooking: looking, microseconds: 1_800_000)
        }
      }.start()
      let object = Owner()
      Thread { runOnceSlowly(for: object, running: bodyRunning, after: looking) }.start()
      Thread {
        _ = bodyRunning.wait(timeout: .now() + TimeScale.seconds(10))
        // Waits for the first, on this thread.
        runOnceSlowly(for: object, running: bodyRunning, after: looking)
      }.start()
      Thread {
        _ = running.wait(timeout: .now() + TimeScale.seconds(10))
        callAndFinish()  // waits for the slow initializer
      }.start()
    case .configuredInCode:
      DeadlockDetection.stalls = .abort(after: .milliseconds(300))
      DeadlockDetection.reportHandler = printHeadline
      let never = DispatchSemaphore(value: 0)
      DispatchQueue.main.async {
        Thread { callAndFinish() }.start()
        _ = never.wait(timeout: .now() + TimeScale.seconds(3))
      }
    case .timedTrackedWaits:
      let worker = WaitTarget.work("worker")
      DispatchQueue.main.async {
        let done = DispatchSemaphore(value: 0)
        let group = DispatchGroup()
        group.enter()
        Thread {
          worker.perform { onceOnMain(token: Tokens.token) {} }
          done.signal()
          group.leave()
        }.start()
        _ = waitUntilParked()  // the worker waits for the initializer
        // As text: Swift 6.0's Dispatch does not mark `DispatchTimeoutResult` `Sendable`.
        let first = "\(done.wait(for: worker, timeout: .now() + .milliseconds(300)))"
        let second = "\(group.wait(for: worker, timeout: .now() + .milliseconds(300)))"
        DispatchQueue.global().async {
          _ = group.wait(timeout: .now() + TimeScale.seconds(10))
          verdict(true, "timed waits: \(first), \(second); the worker finished")
        }
      }
    case .signalledTrackedWait:
      let worker = WaitTarget.work("worker")
      let done = DispatchSemaphore(value: 0)
      DispatchQueue.main.async {
        Thread {
          worker.perform {
            done.signal()
            onceOnMain(token: Tokens.token) {}
          }
        }.start()
        _ = waitUntilParked()  // the worker has signalled, and waits for the initializer
        done.wait(for: worker)
        DispatchQueue.global().async { callAndFinish() }
      }
    case .releasedTrackedWait:
      Thread {
        for round in 0..<400 {
          let holder = TokenHolder()
          let returned = DispatchSemaphore(value: 0)
          Thread {
            let signal = DispatchSemaphore(value: 0)
            let signalAndCall = {
              usleep(1_000)  // the main queue's thread is asleep in its wait by now
              signal.signal()
              onceOnMain(token: holder.token) {}
            }
            if round.isMultiple(of: 2) {
              let worker = WaitTarget.currentThread
              DispatchQueue.main.async { signal.wait(for: worker) }
              signalAndCall()
            } else {
              let work = WaitTarget.work("worker")
              work.perform {
                DispatchQueue.main.async { signal.wait(for: work) }
                signalAndCall()
              }
            }
            returned.signal()
          }.start()
          guard returned.wait(timeout: .now() + TimeScale.seconds(5)) == .success else {
            verdict(false, "round \(round) did not return within \(TimeScale.seconds(5)) s")
          }
        }
        verdict(true, "400 rounds")
      }.start()
    case .progressingMainQueue:
      let item = DispatchSemaphore(value: 0)
      Thread {
        for _ in 0..<300 {
          usleep(10_000)
          item.signal()
        }
      }.start()
      DispatchQueue.main.async {
        Thread { callAndFinish() }.start()
        for _ in 0..<300 { item.wait() }
      }
    case .neverServedAsync:
      Task.detached {
        try await onceOnMain(token: Tokens.token) {}
        verdict(true, "the initializer ran")
      }
      _ = DispatchSemaphore(value: 0).wait(timeout: .now() + TimeScale.seconds(2.5))
    case .neverServedCompletion:
      onceOnMain(token: Tokens.token, completionQueue: .global()) {
      } completion: {
        verdict(true, "the initializer ran")
      }
      _ = DispatchSemaphore(value: 0).wait(timeout: .now() + TimeScale.seconds(2.5))
    case .neverServedAsyncLazy:
      Task.detached {
        _ = try await Tokens.lazy.get()
        verdict(true, "the builder ran")
      }
      _ = DispatchSemaphore(value: 0).wait(timeout: .now() + TimeScale.seconds(2.5))
    case .servedThenBlocked:
      DispatchQueue.main.async { print("the run loop served the main queue") }
      RunLoop.main.run(until: .now + 0.2)
      Thread { callAndFinish() }.start()
      _ = DispatchSemaphore(value: 0).wait(timeout: .now() + TimeScale.seconds(3))
    case .manyWaiters:
      let running = DispatchSemaphore(value: 0)
      let looking = lookOnceParked(65)
      Thread {
        onceOnMain(token: Tokens.token) {
          running.signal()
          takeTime(afterLooking: looking, microseconds: 2_500_000)
        }
      }.start()
      Thread {
        _ = running.wait(timeout: .now() + TimeScale.seconds(10))
        for _ in 0..<63 { Thread { onceOnMain(token: Tokens.token) {} }.start() }
        callAndFinish()
      }.start()
    case .loweredStallTimeout:
      DeadlockDetection.stalls = .report(after: .seconds(3_600))
      let never = DispatchSemaphore(value: 0)
      DispatchQueue.main.async {
        Thread { callAndFinish() }.start()
        Thread {
          _ = waitUntilParked()  // the caller waits
          // The watchdog, started by the caller, sleeps for an hour by now; if it has not got
          // that far, its first round reads the lowered timeout, and the test proves less.
          usleep(300_000)
          DeadlockDetection.stalls = .report(after: .milliseconds(100))
        }.start()
        _ = never.wait(timeout: .now() + TimeScale.seconds(3))
      }
    case .waitCycle:
      let loader = DispatchQueue(label: "loader")
      let done = DispatchSemaphore(value: 0)
      DispatchQueue.main.async {
        onceOnMain(token: Tokens.token) {
          loader.async {
            Tokens.token.wait()
            done.signal()
          }
          _ = waitUntilParked()  // the worker is blocked in its wait
          done.wait(for: .queue(loader))
        }
        verdict(true, "the cycle went unnoticed")
      }
    case .waitWithoutInitializer:
      let initialized = Atomic(false)
      Thread {
        Tokens.token.wait()
        verdict(initialized.load(ordering: .relaxed), "the wait ended")
      }.start()
      _ = DispatchSemaphore(value: 0).wait(timeout: .now() + TimeScale.seconds(2.5))
      onceOnMain(token: Tokens.token) { initialized.store(true, ordering: .relaxed) }
    case .asyncLazyWaitWithoutBuild:
      Task.detached {
        let value = try await Tokens.lazy.wait()
        verdict(value == 42, "the wait ended")
      }
      _ = DispatchSemaphore(value: 0).wait(timeout: .now() + TimeScale.seconds(2.5))
      Task.detached { _ = try await Tokens.lazy.get() }
    case .nestedSyncWithoutIntrospection:
      DeadlockDetection.reportHandler = { report in
        FileHandle.standardError.write(Data((report.text + "\n").utf8))
        verdict(true, "reported: \(report.kind)")
      }
      DispatchQueue.main.async {
        DispatchQueue(label: "fixture.serial").sync { onceOnMain(token: Tokens.token) {} }
        verdict(true, "the nested call returned")
      }
    }
    dispatchMain()
  }
}

/// Keeps the calling thread busy computing for `duration`.
private func compute(for duration: Duration) {
  let end = ContinuousClock.now + duration
  var spins = 0
  while ContinuousClock.now < end { spins &+= 1 }
}

/// A token that lives as long as one round of a scenario.
private final class TokenHolder: Sendable {
  let token = MainOnceToken("released tracked wait")
}

/// An object to scope `runOnce(for:)` to.
private final class Owner: Sendable {}

/// One `runOnce(for:)` call site, whose body signals `running`, then takes 1.8 s (scaled) once
/// the watchdog looks.
private func runOnceSlowly(
  for object: AnyObject, running: DispatchSemaphore, after looking: DispatchGroup
) {
  runOnce(for: object) {
    running.signal()
    takeTime(afterLooking: looking, microseconds: 1_800_000)
  }
}

/// Holds the watchdog's first look at a stall until `count` threads are parked in MainOnce, so
/// that its report lists every caller however long they took to arrive: the stall timeout is an
/// hour until then, and the default, a second, from then on (a new timeout applies at once).
/// Returns a group that is left once the default is back: a slow body waits for it before its
/// own time begins, so that the report comes before the body ends however long the callers took
/// to park (on a loaded machine, under ThreadSanitizer, that once ate all of a body's time).
private func lookOnceParked(_ count: Int) -> DispatchGroup {
  let defaults = DeadlockDetection.stalls
  DeadlockDetection.stalls = .report(after: .seconds(3_600))
  let looking = DispatchGroup()
  looking.enter()
  Thread {
    guard waitUntilParked(count) else {
      verdict(false, "only \(Instrumentation.parkedThreads) of \(count) callers parked")
    }
    DeadlockDetection.stalls = defaults
    looking.leave()
  }.start()
  return looking
}

/// Waits until `looking` (from ``lookOnceParked(_:)``) says the watchdog looks, then sleeps
/// `microseconds` (scaled): a slow body's time.
private func takeTime(afterLooking looking: DispatchGroup, microseconds: UInt32) {
  _ = looking.wait(timeout: .now() + TimeScale.seconds(20))
  usleep(TimeScale.microseconds(microseconds))
}

/// A report handler that prints `HANDLER <kind> <first line>` at once.
@Sendable private func printHeadline(of report: DeadlockReport) {
  let firstLine = report.text.prefix(while: { $0 != "\n" })
  FileHandle.standardOutput.write(Data("HANDLER \(report.kind) \(firstLine)\n".utf8))
}

/// Calls `onceOnMain` and ends the process with a passing verdict once the initializer ran.
///
/// It prints how long it waited first, `CALLER waited <seconds> s`, for the tests to compare
/// with what MainOnce reported. It ends on the main queue, once the block that ran the
/// initializer has returned: MainOnce reports the end of a stall there, after it has woken this
/// caller, and exiting at once would race with that report.
private func callAndFinish() -> Never {
  var ran = false
  let start = ContinuousClock.now
  onceOnMain(token: DeadlockScenario.Tokens.token) { ran = true }
  let (seconds, attoseconds) = (ContinuousClock.now - start).components
  print("CALLER waited \(Double(seconds) + Double(attoseconds) / 1e18) s")
  DispatchQueue.main.async { [ran] in verdict(true, "initializer ran: \(ran)") }
  while true { pause() }
}
