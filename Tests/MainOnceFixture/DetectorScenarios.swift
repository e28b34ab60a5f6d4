import Dispatch
import Foundation
import MainOnce
import MainOnceFixtureSupport
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// Scenarios for a deadlock detector that stops only on a structural proof:
/// `MainOnceFixture detector <scenario>`. Run by `StructuralProofTests`, which says what each
/// must do.
///
/// Those that must go on print `PASS …` when they end as they must; those that MainOnce must
/// stop never print it. Every scenario is bounded by the fixture's watchdog (`FIXTURE_TIMEOUT`
/// overrides its limit of 20 s); every bound is scaled (``TimeScale``). Lengths that are part of
/// what a scenario shows (a wait's deadline against the stall timeout) are not scaled.
///
/// `FIXTURE_REPORT_HANDLER=1` installs a report handler that writes
/// `HANDLER <kind> stops=<stopsProcess> <first line>` to standard output and the whole report to
/// standard error, both unbuffered.
enum DetectorScenario: String, CaseIterable {
  /// A thread performing `job` hands part of it to a helper that performs `job` too, then waits
  /// for `job` with `semaphore.wait(for:)`: the helper finishes after 300 ms.
  case helperPerformsTheJob
  /// As `helperPerformsTheJob`, waiting with `group.wait(for:)`.
  case helperPerformsTheJobGroup
  /// Main-queue code waits in `semaphore.wait(for: job)`; one performer of `job` waits for the
  /// main queue in `onceOnMain`, the other signals after 300 ms (scaled): one signal suffices.
  case firstOfTwoPerformers
  /// Main-queue code runs `withTrackedWait(for: loader) { sem.wait(timeout: .now() + 3) }`
  /// while the thread performing `loader` waits for the main queue in `onceOnMain`: the
  /// closure's wait ends by itself at 3 s, and the program goes on.
  case trackedWaitEndsByItself
  /// As `trackedWaitEndsByItself`, with a deadline of 1.5 s (the stall timeout is 1 s).
  case trackedWaitEndsByItselfSoon
  /// As `trackedWaitEndsByItself`, with `semaphore.wait(for: loader, timeout: .now() + 3)`
  /// instead of the closure: a timed wait in a cycle.
  case timedWaitEndsByItself
  /// Under `service` (from the environment), 3,000 rounds: main-queue code waits in
  /// `semaphore.wait(for:)` for a worker that signals, then at once calls
  /// `DispatchQueue.main.trackedSync {}`, before the main queue's thread has woken up.
  case signalThenSyncOnMain
  /// As `signalThenSyncOnMain`, with a `runOnce(for:)` site around main-queue code's wait that
  /// the worker then calls too, waiting for the main queue's thread to finish running it.
  case signalThenRunOnceOnMain
  /// With the stall response `abort` and a 0.3 s stall timeout, set in code, main-queue code
  /// blocks 2 s (scaled, at most 5 s) in a raw semaphore wait while a worker waits in
  /// `onceOnMain`; the report handler raises the stall timeout to 10 s at the first report. The
  /// program recovers when the main queue's wait ends.
  case raisedStallTimeout
  /// With the stall response `abort` and a 3 s stall timeout, main-queue code blocks for good
  /// in a raw semaphore wait while a worker waits in `onceOnMain`; the report handler lowers
  /// the stall timeout to 100 ms at the first report. The process is stopped.
  case loweredStallTimeoutAfterReport
  /// Main-queue code waits in `semaphore.wait(for: .queue(worker))`; then the serial queue's
  /// work waits in `semaphore.wait(for: .queue(.main))`, closing a cycle of untimed tracked waits. Must stop,
  /// whether MainOnce may read `/proc` or not (`MAINONCE_PROC=off`).
  case cycleClosedByWorker
  /// Under `service`, 100 rounds: main-queue code waits for a worker that signals once the main
  /// queue's thread sleeps, in `semaphore.wait(for:)` and, every other round, in a plain
  /// `semaphore.wait()`. Prints the medians of the time from the signal to the wait's return,
  /// and the largest for the tracked wait: `PASS median=<µs> plainMedian=<µs> max=<µs>`.
  case serviceSignalLatency
  /// Under `service`, main-queue code waits in `semaphore.wait(for:)` for a target nobody
  /// performs, while the thread that will signal waits in `onceOnMain`: nothing in the graph
  /// links the two, and the wait must serve the initializer anyway.
  case serviceUnlinkedSemaphore
  /// As `serviceUnlinkedSemaphore`, with `group.wait(for:)`.
  case serviceUnlinkedGroup
  /// A stall timeout of 100 ms and a report handler that never returns from a stall report;
  /// after the first stall report, main-queue code closes a cycle of untimed waits. The cycle
  /// report must reach the handler and stop the process.
  case stuckReportHandler
  /// Under `dispatchMain()`, a worker calls `onceOnMain` once; then the process idles and
  /// counts its threads and their context switches over 1.2 s:
  /// `PASS threads=<n> wakeups=<n> busy=<thread>:<switches>,…`.
  case idleAfterFirstCall
  /// As `idleAfterFirstCall`, with a bare `DispatchQueue.main.async` and a semaphore instead of
  /// `onceOnMain`: the same program without MainOnce.
  case idleWithoutMainOnce
  /// Waits whose targets are not a closed set of threads, each run `FIXTURE_ROUNDS` times (2 by
  /// default), each round with a fresh token: every one must end, and the process exit 0.
  /// `FIXTURE_HOGS=<n>` starts n threads that only spin, beside them. In each, main-queue code
  /// waits with `done.wait(for: job)`, and a performer of `job` blocks in `onceOnMain`; a
  /// second performer enters `perform` 150 ms after the wait began and signals at 250 ms, inside
  /// it.
  case laterPerformer
  /// As `laterPerformer`, waiting with `group.wait(for: job)`; the second performer leaves the
  /// group at 250 ms.
  case laterPerformerGroup
  /// As `laterPerformer`, but the second performer runs `perform` from 0 to 100 ms, and
  /// signals at 250 ms, after `perform` returned.
  case signalAfterPerform
  /// A job on a serial queue captures `WaitTarget.currentThread` and hands it to main-queue
  /// code, which waits for it; the queue's next job, on the same thread, blocks in `onceOnMain`,
  /// while another job signals at 250 ms. Prints how many rounds ran the next job on the
  /// captured thread: `PASS … sameThread=<n>/<rounds>`.
  case poolThreadTarget
  /// Top-level code on the main thread captures `WaitTarget.currentThread`; a worker's
  /// `runOnce(for:)` body waits for it with `semaphore.wait(for:)`, and then the main thread
  /// calls the same `runOnce(for:)` site, waiting for that body: a cycle through a thread of the
  /// program's own, which must be stopped.
  case mainThreadTarget
  /// A report handler is set before MainOnce reads its settings, which the test makes one it
  /// does not understand: the warning must reach the handler, as a `warning` report, and not
  /// standard error. Prints `HANDLER …` on standard output, only there.
  case warningThroughHandler

  enum Tokens {
    static let token = MainOnceToken("detector scenario")
  }

  func run() -> Never {
    let limit = ProcessInfo.processInfo.environment["FIXTURE_TIMEOUT"].flatMap { Int($0) }
    Watchdog.start(seconds: limit ?? 20)
    if ProcessInfo.processInfo.environment["FIXTURE_REPORT_HANDLER"] == "1" {
      DeadlockDetection.reportHandler = printReport
    }
    let hogs = ProcessInfo.processInfo.environment["FIXTURE_HOGS"].flatMap { Int($0) } ?? 0
    for _ in 0..<hogs { Thread { while true {} }.start() }
    switch self {
    case .laterPerformer, .laterPerformerGroup, .signalAfterPerform, .poolThreadTarget:
      runOpenTargetRounds(self)
    case .mainThreadTarget:
      let mainThread = WaitTarget.currentThread
      let site = Site()
      let never = DispatchSemaphore(value: 0)
      let bodyRuns = DispatchSemaphore(value: 0)
      Thread {
        oneStep(for: site) {
          bodyRuns.signal()
          never.wait(for: mainThread)
        }
      }.start()
      _ = bodyRuns.wait(timeout: .now() + TimeScale.seconds(10))
      oneStep(for: site) {}
      verdict(true, "the cycle went unnoticed")
    case .helperPerformsTheJob, .helperPerformsTheJobGroup:
      let job = WaitTarget.work("job")
      Thread {
        job.perform {
          let done = DispatchSemaphore(value: 0)
          let group = DispatchGroup()
          group.enter()
          Thread {
            job.perform { usleep(300_000) }
            done.signal()
            group.leave()
          }.start()
          if self == .helperPerformsTheJob { done.wait(for: job) } else { group.wait(for: job) }
        }
        verdict(true, "the helper finished the job")
      }.start()
    case .firstOfTwoPerformers:
      let job = WaitTarget.work("job")
      let done = DispatchSemaphore(value: 0)
      let performing = DispatchSemaphore(value: 0)
      let needsMainQueueFinished = DispatchSemaphore(value: 0)
      DispatchQueue.main.async {
        Thread {
          job.perform { onceOnMain(token: Tokens.token) {} }
          needsMainQueueFinished.signal()
        }.start()
        Thread {
          job.perform {
            performing.signal()
            usleep(TimeScale.microseconds(300_000))
          }
          done.signal()
        }.start()
        guard waitUntilParked(),
          performing.wait(timeout: .now() + TimeScale.seconds(10)) == .success
        else { verdict(false, "the performers did not start") }
        done.wait(for: job)
        DispatchQueue.global().async {
          let finished = needsMainQueueFinished.wait(timeout: .now() + TimeScale.seconds(10))
          verdict(finished == .success, "the first performer finished; the other one: \(finished)")
        }
      }
    case .trackedWaitEndsByItself, .trackedWaitEndsByItselfSoon, .timedWaitEndsByItself:
      let loader = WaitTarget.work("loader")
      let finished = DispatchSemaphore(value: 0)
      let never = DispatchSemaphore(value: 0)
      DispatchQueue.main.async {
        Thread {
          loader.perform { onceOnMain(token: Tokens.token) {} }
          finished.signal()
        }.start()
        guard waitUntilParked() else { verdict(false, "the worker never waited") }
        let result: DispatchTimeoutResult
        switch self {
        case .trackedWaitEndsByItselfSoon:
          result = withTrackedWait(for: loader) { never.wait(timeout: .now() + 1.5) }
        case .timedWaitEndsByItself:
          result = never.wait(for: loader, timeout: .now() + 3)
        default:
          result = withTrackedWait(for: loader) { never.wait(timeout: .now() + 3) }
        }
        // As text: Swift 6.0's Dispatch does not mark `DispatchTimeoutResult` `Sendable`.
        let ended = "\(result)"
        DispatchQueue.global().async {
          let worker = finished.wait(timeout: .now() + TimeScale.seconds(10))
          verdict(worker == .success, "the wait ended: \(ended); the worker: \(worker)")
        }
      }
    case .signalThenSyncOnMain, .signalThenRunOnceOnMain:
      Thread {
        let worker = WaitTarget.currentThread
        let rounds = 3_000
        for round in 0..<rounds {
          let signal = DispatchSemaphore(value: 0)
          let returned = DispatchSemaphore(value: 0)
          let site = Site()
          if self == .signalThenSyncOnMain {
            DispatchQueue.main.async {
              signal.wait(for: worker)
              returned.signal()
            }
            usleep(200)  // the main queue's thread is on its way into its wait, or in it
            signal.signal()
            DispatchQueue.main.trackedSync {}
          } else {
            DispatchQueue.main.async {
              oneStep(for: site) { signal.wait(for: worker) }
              returned.signal()
            }
            usleep(200)
            signal.signal()
            oneStep(for: site) {}
          }
          guard returned.wait(timeout: .now() + TimeScale.seconds(5)) == .success else {
            verdict(false, "round \(round) did not return within \(TimeScale.seconds(5)) s")
          }
        }
        verdict(true, "\(rounds) rounds")
      }.start()
    case .raisedStallTimeout, .loweredStallTimeoutAfterReport:
      let raises = self == .raisedStallTimeout
      // Raised: the handler, on a thread of its own, has a timeout (1 s, scaled) to raise it
      // before the look that could stop the process.
      DeadlockDetection.stalls = .abort(after: raises ? .seconds(1).scaled : .seconds(3))
      let reported = Atomic(false)
      DeadlockDetection.reportHandler = { report in
        if report.kind == .stall, !reported.exchange(true, ordering: .relaxed) {
          DeadlockDetection.stalls = .abort(after: raises ? .seconds(10) : .milliseconds(100))
        }
        printReport(report)
      }
      let never = DispatchSemaphore(value: 0)
      DispatchQueue.main.async {
        Thread { callAndFinish() }.start()
        // Raised: three timeouts, so that the first report comes meanwhile and a look under
        // the first timeout would stop it; short of the raised 10 s timeout whatever the scale.
        _ = never.wait(timeout: .now() + (raises ? min(TimeScale.seconds(3), 8) : 30))
      }
    case .cycleClosedByWorker:
      let worker = DispatchQueue(label: "worker")
      let waits = DispatchSemaphore(value: 0)
      DispatchQueue.main.async {
        let never = DispatchSemaphore(value: 0)
        let neither = DispatchSemaphore(value: 0)
        worker.async {
          // Once main-queue code is in its wait: without `/proc`, a fixed pause after it
          // says it is about to wait.
          _ = waits.wait(timeout: .now() + TimeScale.seconds(10))
          usleep(TimeScale.microseconds(200_000))
          neither.wait(for: .queue(.main))
          verdict(true, "the worker's wait returned")
        }
        waits.signal()
        never.wait(for: .queue(worker))
        verdict(true, "the cycle went unnoticed")
      }
    case .serviceSignalLatency:
      DeadlockDetection.cycles = .service
      Thread {
        let worker = WaitTarget.currentThread
        var tracked: [UInt64] = []
        var plain: [UInt64] = []
        // Interleaved: a plain wait measures what the scheduler alone takes to wake a thread.
        for round in 0..<100 {
          let isTracked = round.isMultiple(of: 2)
          let signal = DispatchSemaphore(value: 0)
          let returned = DispatchSemaphore(value: 0)
          let mainQueueThread = Atomic<Int32>(0)
          let returnedAt = Atomic<UInt64>(0)
          DispatchQueue.main.async {
            mainQueueThread.store(KernelThread.current, ordering: .releasing)
            if isTracked { signal.wait(for: worker) } else { signal.wait() }
            returnedAt.store(DispatchTime.now().uptimeNanoseconds, ordering: .releasing)
            returned.signal()
          }
          // Once the main queue's thread sleeps in its wait, and a little longer: the signal
          // must find the wait settled, however it waits.
          _ = waitUntil {
            let thread = mainQueueThread.load(ordering: .acquiring)
            return thread != 0 && KernelThread.isAsleep(thread)
          }
          usleep(5_000)
          let signalledAt = DispatchTime.now().uptimeNanoseconds
          signal.signal()
          guard returned.wait(timeout: .now() + TimeScale.seconds(5)) == .success else {
            verdict(false, "round \(round): the signalled wait did not return")
          }
          let latency = returnedAt.load(ordering: .acquiring) &- signalledAt
          if isTracked { tracked.append(latency) } else { plain.append(latency) }
        }
        tracked.sort()
        plain.sort()
        verdict(
          true,
          "median=\(tracked[tracked.count / 2] / 1_000) plainMedian=\(plain[plain.count / 2] / 1_000)"
            + " max=\(tracked.last! / 1_000)")
      }.start()
    case .serviceUnlinkedSemaphore, .serviceUnlinkedGroup:
      DeadlockDetection.cycles = .service
      let elsewhere = WaitTarget.work("elsewhere")
      let ranInsideTheWait = Atomic(false)
      let waiting = Atomic(false)
      DispatchQueue.main.async {
        let done = DispatchSemaphore(value: 0)
        let group = DispatchGroup()
        group.enter()
        Thread {
          onceOnMain(token: Tokens.token) {
            ranInsideTheWait.store(waiting.load(ordering: .acquiring), ordering: .relaxed)
          }
          done.signal()
          group.leave()
        }.start()
        guard waitUntilParked() else { verdict(false, "the worker never waited") }
        waiting.store(true, ordering: .releasing)
        if self == .serviceUnlinkedSemaphore {
          done.wait(for: elsewhere)
        } else {
          group.wait(for: elsewhere)
        }
        verdict(
          ranInsideTheWait.load(ordering: .relaxed),
          "the wait ended; insideTheWait=\(ranInsideTheWait.load(ordering: .relaxed))")
      }
    case .warningThroughHandler:
      let delivered = DispatchSemaphore(value: 0)
      DeadlockDetection.reportHandler = { report in
        let line = "HANDLER \(report.kind) stops=\(report.stopsProcess) \(report.text)\n"
        FileHandle.standardOutput.write(Data(line.utf8))
        delivered.signal()
      }
      // The first read of the settings, which warns about MAINONCE_STALL_TIMEOUT.
      _ = DeadlockDetection.stalls
      verdict(
        delivered.wait(timeout: .now() + TimeScale.seconds(10)) == .success,
        "the handler received a report")
    case .stuckReportHandler:
      DeadlockDetection.stalls = .report(after: .milliseconds(100))
      let stuck = DispatchSemaphore(value: 0)
      let never = DispatchSemaphore(value: 0)
      DeadlockDetection.reportHandler = { report in
        printReport(report)
        if report.kind == .stall {
          stuck.signal()
          _ = never.wait(timeout: .now() + 3_600)  // never returns, for this test's purposes
        }
      }
      let loader = DispatchQueue(label: "loader")
      DispatchQueue.main.async {
        let done = DispatchSemaphore(value: 0)
        loader.async {
          onceOnMain(token: Tokens.token) {}
          done.signal()
        }
        // The worker's wait for the main queue is reported as a stall, to the handler, which
        // does not return; main-queue code then closes the cycle.
        guard stuck.wait(timeout: .now() + TimeScale.seconds(10)) == .success else {
          verdict(false, "no stall report reached the handler")
        }
        done.wait(for: .queue(loader))
        verdict(true, "the cycle went unnoticed")
      }
    case .idleAfterFirstCall, .idleWithoutMainOnce:
      Thread {
        if self == .idleAfterFirstCall {
          onceOnMain(token: Tokens.token) {}
        } else {
          let hop = DispatchSemaphore(value: 0)
          DispatchQueue.main.async { hop.signal() }
          hop.wait()
        }
        // Whatever the call started settles; then nothing happens for 1.2 s.
        usleep(300_000)
        let me = KernelThread.current
        let before = contextSwitches(except: me)
        usleep(1_200_000)
        let after = contextSwitches(except: me)
        let woken = after.compactMap { thread, switches -> (Int32, Int)? in
          let count = switches - (before[thread] ?? 0)
          return count > 0 ? (thread, count) : nil
        }.sorted { $0.0 < $1.0 }
        let wakeups = woken.map(\.1).reduce(0, +)
        verdict(
          true,
          "threads=\(after.count) wakeups=\(wakeups) busy="
            + woken.map { "\($0.0):\($0.1)" }.joined(separator: ","))
      }.start()
    }
    dispatchMain()
  }
}

/// Runs `scenario`'s rounds one after another, from a thread of their own, each in main-queue
/// code; each round must end within 10 s (scaled).
private func runOpenTargetRounds(_ scenario: DetectorScenario) {
  let rounds = ProcessInfo.processInfo.environment["FIXTURE_ROUNDS"].flatMap { Int($0) } ?? 2
  Thread {
    let sameThread = Locked(0)
    for round in 0..<rounds {
      let token = OpenTargetToken()
      let ended = DispatchSemaphore(value: 0)
      DispatchQueue.main.async {
        if scenario == .poolThreadTarget {
          if waitForPoolThread(needing: token) { sameThread.withLock { $0 += 1 } }
        } else {
          waitForLaterPerformer(scenario, needing: token)
        }
        ended.signal()
      }
      guard ended.wait(timeout: .now() + TimeScale.seconds(10)) == .success,
        waitUntil(timeout: .seconds(10), { token.token.isDone })
      else { verdict(false, "round \(round) did not end") }
    }
    let same =
      scenario == .poolThreadTarget ? " sameThread=\(sameThread.withLock { $0 })/\(rounds)" : ""
    verdict(true, "\(rounds) rounds ended\(same)")
  }.start()
}

/// A fresh token for each round.
private final class OpenTargetToken: Sendable {
  let token = MainOnceToken("open target")
}

/// One round of `laterPerformer`, `laterPerformerGroup` or `signalAfterPerform`, in main-queue
/// code.
private func waitForLaterPerformer(_ scenario: DetectorScenario, needing token: OpenTargetToken) {
  let job = WaitTarget.work("job")
  let done = DispatchSemaphore(value: 0)
  let group = DispatchGroup()
  group.enter()
  let start = ContinuousClock.now
  let signal: @Sendable () -> Void = {
    if scenario == .laterPerformerGroup { group.leave() } else { done.signal() }
  }
  Thread { job.perform { onceOnMain(token: token.token) {} } }.start()
  Thread {
    if scenario == .signalAfterPerform {
      job.perform { sleep(until: start + .milliseconds(100)) }
      sleep(until: start + .milliseconds(250))
      signal()
    } else {
      sleep(until: start + .milliseconds(150))
      job.perform {
        sleep(until: start + .milliseconds(250))
        signal()
      }
    }
  }.start()
  if scenario == .laterPerformerGroup { group.wait(for: job) } else { done.wait(for: job) }
}

/// One round of `poolThreadTarget`, in main-queue code: whether the queue's next job ran on
/// the thread the first captured.
private func waitForPoolThread(needing token: OpenTargetToken) -> Bool {
  let queue = DispatchQueue(label: "pool job")
  let captured = Locked<(target: WaitTarget, thread: Int32)?>(nil)
  let sameThread = Locked(false)
  let done = DispatchSemaphore(value: 0)
  queue.async {
    captured.withLock { $0 = (.currentThread, KernelThread.current) }
    queue.async {
      let capturedThread = captured.withLock { $0?.thread }
      sameThread.withLock { $0 = KernelThread.current == capturedThread }
      onceOnMain(token: token.token) {}
    }
  }
  guard waitUntil({ captured.withLock { $0 } != nil }) else {
    verdict(false, "the queue's first job never ran")
  }
  // The job that signals, on whichever thread runs it.
  DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(250)) { done.signal() }
  done.wait(for: captured.withLock { $0!.target })
  return sameThread.withLock { $0 }
}

/// Sleeps until `instant`.
private func sleep(until instant: ContinuousClock.Instant) {
  let left = instant - ContinuousClock.now
  if left > .zero { usleep(UInt32(left.components.attoseconds / 1_000_000_000_000)) }
}

/// One `runOnce(for:)` call site, whose body is `body`: every caller shares it.
private func oneStep(for site: Site, _ body: () -> Void) {
  runOnce(for: site) { body() }
}

/// An object to scope one round's `runOnce(for:)` to.
private final class Site: Sendable {}

/// Writes `HANDLER <kind> stops=<stopsProcess> <first line>` to standard output and the report
/// to standard error, unbuffered.
@Sendable private func printReport(_ report: DeadlockReport) {
  let firstLine = report.text.prefix(while: { $0 != "\n" })
  FileHandle.standardOutput.write(
    Data("HANDLER \(report.kind) stops=\(report.stopsProcess) \(firstLine)\n".utf8))
  let site = report.callSite.map { "\($0)" } ?? "none"
  let threads = report.threads.map { "\($0)" }.joined(separator: ",")
  FileHandle.standardOutput.write(
    Data(
      "FIELDS \(report.kind) site=\(site) threads=\(threads) label=\(report.label ?? "none")\n"
        .utf8))
  FileHandle.standardError.write(Data((report.text + "\n").utf8))
}

/// Each thread of this process but `excluded`, with its context switches so far (voluntary
/// and involuntary, from `/proc/self/task/<tid>/status`): how often it has been woken up.
private func contextSwitches(except excluded: Int32) -> [Int32: Int] {
  let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
  var switches: [Int32: Int] = [:]
  for task in tasks {
    guard let thread = Int32(task), thread != excluded,
      let status = try? String(contentsOfFile: "/proc/self/task/\(task)/status", encoding: .utf8)
    else { continue }
    switches[thread] = status.split(separator: "\n").reduce(0) { total, line in
      guard
        line.hasPrefix("voluntary_ctxt_switches:") || line.hasPrefix("nonvoluntary_ctxt_switches:")
      else { return total }
      return total
        + (line.split(separator: ":").last.flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }
          ?? 0)
    }
  }
  return switches
}

/// Calls `onceOnMain` and ends the process with a passing verdict once the initializer ran,
/// printing first how long it waited: `CALLER waited <seconds> s`.
private func callAndFinish() -> Never {
  var ran = false
  let start = ContinuousClock.now
  onceOnMain(token: DetectorScenario.Tokens.token) { ran = true }
  let (seconds, attoseconds) = (ContinuousClock.now - start).components
  print("CALLER waited \(Double(seconds) + Double(attoseconds) / 1e18) s")
  DispatchQueue.main.async { [ran] in verdict(true, "initializer ran: \(ran)") }
  while true { pause() }
}
