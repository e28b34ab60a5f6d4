// Runs the libuv recipe of LibuvRecipe.swift as an application would, and checks what it
// promises:
//
// - a worker thread's onceOnMain is served by the libuv loop: its initializer runs once, on the
//   main thread;
// - a Timer on RunLoop.main fires under the loop: a main-queue block schedules it, and it
//   starts the main-actor task that stops serving;
// - once a main-actor task stops serving, `uv_run(UV_RUN_DEFAULT)` returns by itself, with
//   nothing else to do, and `uv_loop_close` returns 0: the recipe leaves no handle behind.
//
//   swift run --package-path Examples/EventLoops LibuvRecipe
//
// It prints PASS and exits 0, or prints what went wrong and exits 1; it gives up after a minute
// (times MAINONCE_TEST_TIME_SCALE, as the tests' bounds, if that is set).
import CLibuv
import CThreadID
import Dispatch
import Foundation
import MainOnce
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

enum Check {
  static let setupToken = MainOnceToken("libuv setup")
  /// How many times the setup ran, and the thread it last ran on.
  static let setupRuns = Atomic(0)
  static let setupThread = Atomic(0)
  /// Whether the main-queue task that stops serving ran.
  static let stopped = Atomic(false)
  /// What stops serving the main queue: the recipe's result, called on the main thread.
  @MainActor static var stopServing: (() -> Void)?

  /// When the check gives up: a bound against a hang only, generous on a busy machine.
  static let giveUpSeconds =
    60 * (getenv("MAINONCE_TEST_TIME_SCALE").flatMap { Double(String(cString: $0)) } ?? 1)

  static func fail(_ message: String) -> Never {
    let line = "libuv recipe: FAIL: \(message)\n"
    _ = line.withCString { write(2, $0, strlen($0)) }
    exit(1)
  }
}

/// The application ends this way: a task on the main actor stops serving the main queue.
func stopServingMainQueue() {
  Task { @MainActor in
    Check.stopServing?()
    Check.stopServing = nil
    Check.stopped.store(true, ordering: .relaxed)
  }
}

/// A worker thread that needs the main thread's setup, then ends the application.
func startWorker() {
  DispatchQueue.global().async {
    onceOnMain(token: Check.setupToken) {
      MainContext.requireMainThread(for: "the libuv application")
      Check.setupRuns.add(1, ordering: .relaxed)
      Check.setupThread.store(Int(example_thread_id()), ordering: .relaxed)
    }
    print("worker: onceOnMain returned")
    // The application ends from a timer on RunLoop.main, which the loop must fire.
    DispatchQueue.main.async {
      _ = Timer.scheduledTimer(withTimeInterval: 0.1, repeats: false) { _ in
        stopServingMainQueue()
      }
    }
  }
}

let loop = uv_default_loop()!
Check.stopServing = serveMainQueueFromLibuv(loop)  // top-level code runs on the main actor
DispatchQueue.global().asyncAfter(deadline: .now() + Check.giveUpSeconds) {
  let bound = "within \(Check.giveUpSeconds) s"
  Check.fail(
    Check.stopped.load(ordering: .relaxed)
      ? "serving was stopped, but uv_run did not return \(bound): a handle keeps the loop alive"
      : "serving was not stopped \(bound): the main queue was not served")
}
startWorker()
let result = uv_run(loop, UV_RUN_DEFAULT)
print("uv_run returned \(result)")
guard Check.stopped.load(ordering: .relaxed) else {
  Check.fail("uv_run returned before serving was stopped")
}
let closed = uv_loop_close(loop)
guard closed == 0 else {
  let name = String(cString: uv_err_name(closed))
  Check.fail("uv_loop_close returned \(closed) (\(name)): a handle is still open")
}
guard Check.setupRuns.load(ordering: .relaxed) == 1 else {
  Check.fail("the setup ran \(Check.setupRuns.load(ordering: .relaxed)) times, not once")
}
guard Check.setupThread.load(ordering: .relaxed) == Int(getpid()) else {
  Check.fail(
    "the setup ran on thread \(Check.setupThread.load(ordering: .relaxed)), not the main thread")
}
print(
  "PASS: libuv recipe: the setup ran once, on the main thread (thread \(getpid())); uv_run ended"
    + " by itself once serving stopped; uv_loop_close returned 0")
exit(0)
