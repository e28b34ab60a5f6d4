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
}
