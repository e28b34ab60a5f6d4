import Dispatch
import Foundation
import MainOnce
import MainOnceFixtureSupport
import Synchronization

/// Scenarios for the `service` policy: `MainOnceFixture service <scenario>`. Each sets the
/// policy in code (except `fromEnvironment`, which relies on `MAINONCE_DEADLOCK=service`), runs
/// under `dispatchMain()`, and prints `PASS …` when it ends as it must.
enum ServiceScenario: String, CaseIterable {
  /// Workers block in `onceOnMain` first; then main-queue code waits for them (a semaphore).
  case workerFirst
  /// Main-queue code waits first (a semaphore); then the worker blocks in `onceOnMain`.
  case mainFirst
  /// As `mainFirst`, waiting with a group.
  case mainFirstGroup
  /// As `mainFirst`, with the policy from `MAINONCE_DEADLOCK=service`.
  case fromEnvironment
  /// The serviced initializer throws: its error reaches its own caller, the worker.
  case throwingInitializer
  /// Eight workers race on one token while main-queue code waits for all of them.
  case race
  /// Main-queue code, inside a serial queue's `sync`, and a worker, in `trackedSync` on that
  /// queue, wait for each other with no initializer between them.
  case unbreakable
  /// A main-queue initializer running in place waits for a worker that waits for that same
  /// initializer: the initializer already runs, so serving cannot break the cycle.
  case runningInitializerWaits
  /// Main-queue code blocks in `trackedSync` on a queue a worker holds, which cannot be
  /// interrupted; then the worker, still holding it, blocks in `onceOnMain`.
  case uninterruptibleSync
  /// The worker blocks in `onceOnMain` first; then main-queue code waits for it in
  /// `withTrackedWait`, which serves nothing: a possible deadlock, reported.
  case trackedWaitWorkerFirst
  /// The worker blocks in `onceOnMain` inside a serial queue's `sync`; then main-queue code
  /// calls `trackedSync` on that queue, which serves nothing: a deadlock, stopped.
  case trackedSyncWorkerFirst

  enum Tokens {
    static let token = MainOnceToken("service scenario")
  }

  func run() -> Never {
    let limit = ProcessInfo.processInfo.environment["FIXTURE_TIMEOUT"].flatMap { Int($0) }
    Watchdog.start(seconds: limit ?? 20)
    if self != .fromEnvironment { DeadlockDetection.cycles = .service }
    let worker = WaitTarget.work("worker")
    let record = InitializerRecord()
    DispatchQueue.main.async {
      switch self {
      case .workerFirst, .trackedWaitWorkerFirst:
        let done = DispatchSemaphore(value: 0)
        Thread {
          worker.perform { onceOnMain(token: Tokens.token) { record.ran() } }
          done.signal()
        }.start()
        awaitParkedWorker()
        record.waitBegins()
        if self == .workerFirst {
          done.wait(for: worker)
        } else {
          withTrackedWait(for: worker) { done.wait() }
        }
        record.finish("the wait ended")
      case .uninterruptibleSync:
        let queue = DispatchQueue(label: "service.held")
        let held = DispatchSemaphore(value: 0)
        let mainQueueThread = KernelThread.current
        Thread {
          queue.sync {
            held.signal()
            // Once main-queue code sleeps in its trackedSync on this queue.
            _ = waitUntil { KernelThread.isAsleep(mainQueueThread) }
            onceOnMain(token: Tokens.token) { record.ran() }
          }
        }.start()
        held.wait()
        queue.trackedSync {}
        record.finish("the cycle went unnoticed")
      case .mainFirst, .fromEnvironment, .mainFirstGroup:
        let done = DispatchSemaphore(value: 0)
        let group = DispatchGroup()
        group.enter()
        let waits = DispatchSemaphore(value: 0)
        let mainQueueThread = KernelThread.current
        Thread {
          // Once main-queue code is about to wait, and its thread sleeps (in that wait).
          _ = waits.wait(timeout: .now() + TimeScale.seconds(10))
          _ = waitUntil { KernelThread.isAsleep(mainQueueThread) }
          worker.perform { onceOnMain(token: Tokens.token) { record.ran() } }
          done.signal()
          group.leave()
        }.start()
        record.waitBegins()
        waits.signal()
        if self == .mainFirstGroup { group.wait(for: worker) } else { done.wait(for: worker) }
        record.finish("the wait ended")
      case .throwingInitializer:
        let done = DispatchSemaphore(value: 0)
        let caught = Locked<String>("nothing")
        Thread {
          worker.perform {
            do throws(Refused) {
              try onceOnMain(token: Tokens.token) { () throws(Refused) in
                record.ran()
                throw Refused()
              }
              caught.withLock { $0 = "no error" }
            } catch {
              caught.withLock { $0 = "its own error" }
            }
          }
          done.signal()
        }.start()
        awaitParkedWorker()
        record.waitBegins()
        done.wait(for: worker)
        record.finish("the worker caught \(caught.withLock { $0 })", expectingDone: false)
      case .race:
        let group = DispatchGroup()
        let gate = StartGate(parties: 8)
        for _ in 0..<8 {
          group.enter()
          Thread {
            gate.arriveAndWait()
            worker.perform { onceOnMain(token: Tokens.token) { record.ran() } }
            group.leave()
          }.start()
        }
        awaitParkedWorker()  // one at least; the others may still be on their way
        record.waitBegins()
        group.wait(for: worker)
        record.finish("the wait ended")
      case .unbreakable:
        let never = DispatchSemaphore(value: 0)
        let workerThread = Atomic<Int32>(0)
        let held = DispatchQueue(label: "service.held")
        let workerQueue = DispatchQueue(label: "worker")
        held.sync {
          workerQueue.async {
            workerThread.store(KernelThread.current, ordering: .releasing)
            held.trackedSync {}
          }
          // The worker sleeps in its wait for the queue main-queue code holds.
          _ = waitUntil {
            let thread = workerThread.load(ordering: .acquiring)
            return thread != 0 && KernelThread.isAsleep(thread)
          }
          never.wait(for: .queue(workerQueue))
        }
        record.finish("the cycle went unnoticed")
      case .runningInitializerWaits:
        onceOnMain(token: Tokens.token) {
          let done = DispatchSemaphore(value: 0)
          let workerQueue = DispatchQueue(label: "worker")
          workerQueue.async {
            onceOnMain(token: Tokens.token) {}
            done.signal()
          }
          awaitParkedWorker()
          done.wait(for: .queue(workerQueue))
        }
        record.finish("the cycle went unnoticed")
      case .trackedSyncWorkerFirst:
        let queue = DispatchQueue(label: "service.serial")
        Thread {
          queue.sync { onceOnMain(token: Tokens.token) { record.ran() } }
        }.start()
        awaitParkedWorker()  // inside the queue
        record.waitBegins()
        queue.trackedSync {}
        record.finish("the wait ended")
      }
    }
    dispatchMain()
  }
}

private struct Refused: Error {}

/// Returns once a worker is parked in MainOnce, waiting for the initializer (its hop is on its
/// way, and the deadlock detector sees its wait); ends the scenario if none is within 10 s
/// (scaled).
private func awaitParkedWorker() {
  guard waitUntilParked() else { verdict(false, "the worker never waited for the initializer") }
}

/// What the serviced initializers saw, checked when the scenario ends.
private final class InitializerRecord: Sendable {
  private let runs = Atomic(0)
  private let waiting = Atomic(false)
  private let ranInsideTheWait = Atomic(0)
  private let ranInMainContext = Atomic(0)

  func waitBegins() { waiting.store(true, ordering: .releasing) }

  @MainActor
  func ran() {
    runs.add(1, ordering: .relaxed)
    if waiting.load(ordering: .acquiring) { ranInsideTheWait.add(1, ordering: .relaxed) }
    if MainContext.isCurrent { ranInMainContext.add(1, ordering: .relaxed) }
  }

  /// Prints the verdict: the initializer ran once (or, for a throwing one, as often as it was
  /// tried), in main context, nested in the main-queue code's wait; and the token is done if
  /// `expectingDone`.
  func finish(_ message: String, expectingDone: Bool = true) -> Never {
    let runs = runs.load(ordering: .relaxed)
    let summary =
      "\(message) runs=\(runs) insideTheWait=\(ranInsideTheWait.load(ordering: .relaxed))"
      + " inMainContext=\(ranInMainContext.load(ordering: .relaxed))"
      + " done=\(ServiceScenario.Tokens.token.isDone)"
    let passed =
      runs >= 1 && ranInsideTheWait.load(ordering: .relaxed) == runs
      && ranInMainContext.load(ordering: .relaxed) == runs
      && ServiceScenario.Tokens.token.isDone == expectingDone && (expectingDone ? runs == 1 : true)
    verdict(passed, summary)
  }
}
