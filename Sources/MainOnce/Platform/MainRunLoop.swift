internal import _CMainOnceShims

/// Whether `RunLoop.main` is running, asked of CoreFoundation without importing Foundation.
///
/// A stall report needs this to tell a main thread that has never served the main queue from one
/// whose run loop is serving it and is stuck inside a main-queue block: both hold the main queue
/// and can be blocked in `futex`. A running run loop has a current mode.
///
/// MainOnce does not link Foundation: the C shim references CoreFoundation weakly, so the
/// answer is "no" in a program that does not link Foundation, where no `RunLoop` can run, and
/// it is right in static binaries too (where `dlsym` finds nothing).
enum MainRunLoop {
  /// Whether the main thread's run loop is running in some mode right now. Thread-safe:
  /// `CFRunLoopCopyCurrentMode` takes the run loop's own lock. Only a stall report asks.
  static var isRunning: Bool { mainonce_main_run_loop_is_running() }

  /// Runs one pass of the main run loop in its default mode without waiting: its due timers, its
  /// `perform` blocks and its ready sources. Nothing where Foundation is not linked. Main thread
  /// only.
  static func pass() { _ = mainonce_main_run_loop_pass() }

  /// Milliseconds until the main run loop's next default-mode timer is due, rounded up: 0 if
  /// one is due, -1 if none is scheduled or Foundation is not linked. Main thread only: a timer
  /// is scheduled on the run loop of the thread that schedules it.
  static var millisecondsToNextTimer: Int32 {
    let seconds = mainonce_main_run_loop_next_timer()
    guard seconds >= 0 else { return -1 }
    return Int32(min(seconds * 1_000, Double(Int32.max)).rounded(.up))
  }
}
