import Dispatch
import Foundation
import MainOnce
import MainOnceFixtureSupport

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// A prefork server: top-level code forks before it starts any thread of libdispatch's, and the
/// child uses MainOnce. `MainOnceFixture fork <scenario>`.
///
/// The parent waits for the child at most 10 s (scaled; then kills it), and prints
/// `CHILD exited <status>` or `CHILD signal <number>`; the child prints `PASS …` before it exits
/// normally. The child is bounded by `alarm`, which ends it even while its only thread is parked.
enum ForkScenario: String, CaseIterable {
  /// In the child, a worker thread uses MainOnce first (and so decides how MainOnce reads the
  /// main queue); then top-level code, on the thread that forked, calls `onceOnMain`.
  case mainAfterWorker
  /// In the child, top-level code calls `onceOnMain`: MainOnce's first use in the process.
  case mainFirst
  /// The parent used MainOnce on its main thread before forking; in the child, a worker uses it,
  /// then top-level code calls `onceOnMain` for a fresh token.
  case usedBeforeFork
  /// The parent has run work on libdispatch's worker threads before forking; in the child,
  /// top-level code calls `onceOnMain`.
  case afterDispatchWorkers
  /// A `Thread` forks, libdispatch's worker threads not started; in the child, that thread (the
  /// child's only one, its main thread) calls `onceOnMain`. The parent's main thread waits.
  case fromThread

  func run() -> Never {
    switch self {
    case .usedBeforeFork:
      onceOnMain(token: ForkTokens.parent) {}
    case .afterDispatchWorkers:
      let ran = DispatchSemaphore(value: 0)
      DispatchQueue.global().async { ran.signal() }
      ran.wait()
    case .fromThread:
      // The thread reaps the child and ends the process; the main thread only waits.
      Thread { self.forkAndWait() }.start()
      while true { pause() }
    case .mainAfterWorker, .mainFirst:
      break
    }
    forkAndWait()
  }

  /// Forks; in the parent, waits for the child and ends the process with its verdict.
  private func forkAndWait() -> Never {
    let child = fork()
    if child == 0 { runChild() }
    guard child > 0 else {
      tell("FAIL fork failed: \(errno)")
      exit(1)
    }
    var status: Int32 = 0
    let deadline = Date().addingTimeInterval(TimeScale.seconds(10))
    while waitpid(child, &status, WNOHANG) == 0 {
      if Date() > deadline {
        kill(child, SIGKILL)
        _ = waitpid(child, &status, 0)
        tell("FAIL the child did not end within the time limit")
        exit(3)
      }
      usleep(10_000)
    }
    let signal = status & 0x7f
    tell(signal == 0 ? "CHILD exited \((status >> 8) & 0xff)" : "CHILD signal \(signal)")
    exit(signal == 0 && (status >> 8) & 0xff == 0 ? 0 : 1)
  }

  private func runChild() -> Never {
    // SIGALRM's default action ends the child, also while its thread is parked for good; a
    // `Thread` that forked may have it blocked.
    var alarmOnly = sigset_t()
    sigemptyset(&alarmOnly)
    sigaddset(&alarmOnly, SIGALRM)
    pthread_sigmask(SIG_UNBLOCK, &alarmOnly, nil)
    alarm(UInt32(TimeScale.seconds(5).rounded(.up)))
    if self == .mainAfterWorker || self == .usedBeforeFork {
      let used = DispatchSemaphore(value: 0)
      Thread {
        tell("WORKER in main context: \(MainContext.isCurrent)")
        used.signal()
      }.start()
      used.wait()
    }
    tell("CALLSITE MainOnceFixture/ForkScenarios.swift:\(#line + 1)")
    onceOnMain(token: ForkTokens.child) {
      tell("INITIALIZER ran in the child")
    }
    tell(
      "PASS top-level code in the child ran its initializer; main context: \(MainContext.isCurrent)"
    )
    exit(0)
  }
}

private enum ForkTokens {
  static let parent = MainOnceToken("parent")
  static let child = MainOnceToken("child")
}

/// Writes `line` to standard output at once (unbuffered), so that it survives a stop that follows.
private func tell(_ line: String) {
  FileHandle.standardOutput.write(Data((line + "\n").utf8))
}
