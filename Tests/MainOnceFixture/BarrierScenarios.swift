import CFixtureShims
import Dispatch
import Foundation
import MainOnce
import MainOnceFixtureSupport
import Synchronization

/// A heavy barrier that worked when the process was loaded and fails later:
/// `MainOnceFixture barrier <scenario>`. A real seccomp filter, installed on every thread, makes
/// `membarrier` fail with `ENOSYS`; then comes a real cycle: main-queue code waits in
/// `semaphore.wait(for: .queue(worker))`, and `worker`, a serial queue, runs a block that waits
/// in `onceOnMain` for the main queue before it would signal. MainOnce must stop it
/// ("MainOnce: deadlock detected") and say once, as a warning, that the barrier failed.
///
/// A report handler prints `HANDLER <kind> stops=<stopsProcess> <text>` for each report, and,
/// for the one that stops the process, `LATENCY <ms>`: the time from the cycle's closing
/// (`filterFirst`) or the filter's installation (`publishedFirst`) to the report. The stall
/// timeout is a minute, so that no stall report comes in between. Bounded by the watchdog
/// (10 s, scaled): a cycle not stopped by then prints `FAIL …`.
enum BarrierScenario: String, CaseIterable {
  /// The filter, then the cycle: the worker's wait is published before any reader has found the
  /// barrier failing, the main queue's wait after or before, as it happens.
  case filterFirst
  /// The cycle's waits published while deadlock detection is off (`cycles` is `off`),
  /// both of them under the barrier protocol, then the filter, then `abort`: each wait must be
  /// published again before a reader may see it.
  case publishedFirst

  private enum Tokens {
    static let token = MainOnceToken("barrier scenario")
  }

  /// When the clock of ``latency`` started, in uptime nanoseconds.
  private static let since = Atomic<UInt64>(0)

  func run() -> Never {
    Watchdog.start(seconds: 10)
    DeadlockDetection.stalls = .report(after: .seconds(60))
    DeadlockDetection.reportHandler = { report in
      let now = DispatchTime.now().uptimeNanoseconds
      tell("HANDLER \(report.kind) stops=\(report.stopsProcess) \(report.text)")
      if report.stopsProcess {
        let start = BarrierScenario.since.load(ordering: .acquiring)
        tell("LATENCY \(String(format: "%.1f", Double(now &- start) / 1e6))")
      }
    }
    let worker = DispatchQueue(label: "fixture.barrier.worker")
    let signalled = DispatchSemaphore(value: 0)
    let cycle = {
      DispatchQueue.main.async {
        worker.async {
          BarrierScenario.closing()
          onceOnMain(token: Tokens.token) {}
          signalled.signal()
        }
        BarrierScenario.closing()
        signalled.wait(for: .queue(worker))
        verdict(false, "the main queue's wait returned")
      }
    }
    switch self {
    case .filterFirst:
      denyMembarrier()
      cycle()
    case .publishedFirst:
      DeadlockDetection.cycles = .off
      cycle()
      Thread {
        // Both waits are published once their grace period (50 ms) is over.
        usleep(TimeScale.microseconds(500_000))
        denyMembarrier()
        BarrierScenario.since.store(DispatchTime.now().uptimeNanoseconds, ordering: .releasing)
        DeadlockDetection.cycles = .abort
      }.start()
    }
    dispatchMain()
  }

  /// One side of the cycle is about to wait: the cycle closes when the later one does.
  private static func closing() {
    since.max(DispatchTime.now().uptimeNanoseconds, ordering: .acquiringAndReleasing)
  }

  /// Installs the filter on every thread and checks that `membarrier` now fails.
  private func denyMembarrier() {
    let status = fixture_deny_membarrier()
    guard status == 0 else { verdict(false, "cannot install the seccomp filter: \(status)") }
    let error = fixture_membarrier()
    guard error == ENOSYS else { verdict(false, "membarrier under the filter: \(error)") }
    tell("FILTER membarrier fails with errno \(error)")
  }
}

/// Writes `line` to standard output at once (unbuffered), so that it survives a stop that follows.
private func tell(_ line: String) {
  FileHandle.standardOutput.write(Data((line + "\n").utf8))
}
