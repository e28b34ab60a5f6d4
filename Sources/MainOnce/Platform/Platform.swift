// Platform facts: what the rest of MainOnce asks the system and libdispatch. This room owns
// thread ids, the clock, the environment and a queue to run work on (this file), MainOnce's
// environment variables (`Settings.swift`), locks (`Lock.swift`), who holds the main queue, read
// from libdispatch's lock word, and who serves it (`QueueOwnership.swift`, `MainRunLoop.swift`),
// and where a report goes (`ReportDelivery.swift`), with the C shim `_CMainOnceShims` under
// them. It calls no other room but `Reporting/`, for warnings and crash messages. The deadlock
// detector's settings it reads as words, which the detector turns into its policies.
internal import _CMainOnceShims

#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Musl)
  internal import Musl
#elseif canImport(Darwin)
  internal import Darwin
#endif

/// A kernel thread id: what `/proc/self/task/<tid>` and libdispatch's queue locks use.
struct ThreadID: Hashable, Sendable, CustomStringConvertible {
  let rawValue: Int32

  /// The calling thread's id. A system call; cache it (``ThreadRecord`` does).
  static func current() -> ThreadID {
    #if os(Linux)
      ThreadID(rawValue: mainonce_thread_id())
    #else
      var id: UInt64 = 0
      pthread_threadid_np(nil, &id)
      return ThreadID(rawValue: Int32(truncatingIfNeeded: id))
    #endif
  }

  /// The process's main thread: on Linux its tid is the pid.
  static var mainThread: ThreadID { ThreadID(rawValue: getpid()) }

  var description: String { "thread \(rawValue)" }
}

enum Platform {
  /// Whether this process is a test runner: `swift test` runs the package's `.xctest` bundle,
  /// which runs XCTest and Swift Testing tests (and Swift Testing's exit tests) alike.
  static let isTestRunner: Bool = {
    var path = [CChar](repeating: 0, count: 4_096)
    let length = readlink("/proc/self/exe", &path, path.count - 1)
    guard length > 0 else { return false }
    return String(decoding: path[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
      .hasSuffix(".xctest")
  }()

  /// Whether this test runner runs Swift Testing rather than XCTest, decided as SwiftPM's
  /// generated runner decides it: `--testing-library swift-testing` (which `swift test` passes,
  /// and Swift Testing passes on to an exit test's process) runs Swift Testing; else XCTest.
  static let isSwiftTestingRunner: Bool =
    isTestRunner
    && zip(CommandLine.arguments, CommandLine.arguments.dropFirst()).contains {
      $0 == "--testing-library" && $1.lowercased() == "swift-testing"
    }

  /// The value of an environment variable, read without Foundation.
  static func environment(_ name: String) -> String? {
    getenv(name).map { String(cString: $0) }
  }

  /// Runs `body` on libdispatch's overcommit global queue, after `delay` nanoseconds: on a
  /// thread of its own if every worker is busy or blocked, so that a body that blocks delays no
  /// other, and a timer fires even when the thread pool is exhausted.
  static func runOnOvercommitQueue(
    afterNanoseconds delay: UInt64 = 0, _ body: @escaping @Sendable () -> Void
  ) {
    mainonce_async_overcommit(delay, Unmanaged.passRetained(ThreadBody(body)).toOpaque()) {
      context in
      Unmanaged<ThreadBody>.fromOpaque(context!).takeRetainedValue().body()
    }
  }

  /// Sleeps the calling thread for at least `microseconds`: a signal that interrupts the sleep
  /// (`EINTR`) does not cut it short; the rest is slept.
  static func sleep(microseconds: UInt32) {
    var remaining = timespec(
      tv_sec: Int(microseconds / 1_000_000), tv_nsec: Int(microseconds % 1_000_000) * 1_000)
    while true {
      var request = remaining
      if nanosleep(&request, &remaining) == 0 { return }
      // Only a signal may end it early; anything else (`EINVAL`) is a bug in the interval.
      let error = errno
      if error != EINTR {
        Diagnostics.internalInconsistency("nanosleep failed with errno \(error)")
      }
    }
  }

  /// Orders a reader of the wait board against the threads that withdraw their waits (see
  /// `WaitBoard`); whether a heavy barrier did, so that slots published under the barrier
  /// protocol may be read. `membarrier` that worked at load and fails now switches the board to
  /// the sequentially consistent protocol for good; the reader that switched it says so, once.
  static func heavyBarrier() -> Bool {
    let result = mainonce_heavy_barrier()
    if result > 0 {
      DeadlockReport.warning(
        "MainOnce: membarrier failed with errno \(result) (\(String(cString: strerror(result))))"
          + " though it worked at load (a seccomp filter installed since?); the deadlock"
          + " detector now reads waits with sequentially consistent operations. Blocked"
          + " once-cell callers and semaphore or group waits publish theirs again within 25 ms;"
          + " a trackedSync blocked in sync or a withTrackedWait that began before now is"
          + " missed until it ends, and a deadlock closed through one goes unseen meanwhile."
      ).deliver(at: nil)
    }
    return result == 0
  }

  /// Monotonic time in nanoseconds.
  static func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    // `CLOCK_MONOTONIC` exists on every Linux kernel, and `now` is a valid address: a failure
    // means the process is broken, and a time of 0 would silently corrupt every duration.
    if clock_gettime(CLOCK_MONOTONIC, &now) != 0 {
      Diagnostics.internalInconsistency("clock_gettime(CLOCK_MONOTONIC) failed with errno \(errno)")
    }
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
  }
}

/// A closure, boxed to pass through a C callback's context pointer.
private final class ThreadBody: Sendable {
  let body: @Sendable () -> Void

  init(_ body: @escaping @Sendable () -> Void) { self.body = body }
}
