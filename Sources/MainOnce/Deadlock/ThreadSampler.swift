#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Musl)
  internal import Musl
#elseif canImport(Darwin)
  internal import Darwin
#endif

/// What a thread is doing, as `/proc/self/task/<tid>/stat` and `/syscall` show it.
///
/// Both files are readable for the process's own threads without ptrace. Where they are
/// missing (not Linux, or a restricted `/proc`), the activity is ``Activity/unknown``.
struct ThreadActivity: Equatable, CustomStringConvertible {
  enum Activity: Equatable {
    /// Running or runnable: computing.
    case running
    /// Blocked in `futex`: a lock, semaphore or condition wait.
    case blockedOnLock
    /// In `nanosleep` or `clock_nanosleep`.
    case sleeping
    /// Idle in `poll`, `ppoll`, `select` or `epoll_wait`: an event loop waiting for input.
    case polling(String)
    /// In `rt_sigsuspend` or `pause`: how `dispatchMain()` parks the main thread.
    case suspended
    /// Blocked in another system call, such as `read`.
    case inSystemCall(String)
    /// Not readable.
    case unknown
  }

  let activity: Activity

  /// Whether the thread is blocked in a way that can be waiting for another thread forever.
  var isBlockedOnLock: Bool { activity == .blockedOnLock }

  var description: String {
    switch activity {
    case .running: "busy running code"
    case .blockedOnLock: "blocked in futex (a lock, semaphore or condition wait)"
    case .sleeping: "sleeping (clock_nanosleep)"
    case .polling(let call): "idle in \(call), waiting for events"
    case .suspended: "parked in rt_sigsuspend, as dispatchMain() leaves the main thread"
    case .inSystemCall(let call): "blocked in the system call \(call)"
    case .unknown: "in a state MainOnce cannot read"
    }
  }
}

/// How much a thread has run: evidence of progress between two readings. A thread blocked in
/// the same wait for good reads the same every time; one that wakes, even briefly, does not.
struct ThreadProgress: Equatable {
  /// Nanoseconds on a CPU and times scheduled in, from `/proc/self/task/<tid>/schedstat`.
  let runNanoseconds: UInt64
  let timeslices: UInt64
}

enum ThreadSampler {
  /// One reading of how much `thread` has run; `nil` where `/proc` does not say.
  static func progress(of thread: ThreadID) -> ThreadProgress? {
    guard let text = contents(of: "/proc/self/task/\(thread.rawValue)/schedstat") else {
      return nil
    }
    let fields = text.split(whereSeparator: { $0 == " " || $0 == "\n" }).compactMap {
      UInt64($0)
    }
    guard fields.count == 3 else { return nil }
    return ThreadProgress(runNanoseconds: fields[0], timeslices: fields[2])
  }

  /// Samples `thread` until three readings 30 ms apart agree, for at most about a second.
  static func stableActivity(of thread: ThreadID) -> ThreadActivity {
    var readings: [ThreadActivity] = [activity(of: thread)]
    for _ in 0..<30 {
      if readings.count >= 3 && readings.suffix(3).allSatisfy({ $0 == readings.last }) { break }
      Platform.sleep(microseconds: 30_000)
      readings.append(activity(of: thread))
    }
    let last = readings.last!
    // A thread that keeps changing state is doing work.
    return readings.suffix(3).allSatisfy { $0 == last } ? last : ThreadActivity(activity: .running)
  }

  /// One reading of `thread`: its state, what it is blocked in, and how much it has run, read in
  /// that order.
  struct Reading {
    let isAsleep: Bool
    let activity: ThreadActivity.Activity
    let progress: ThreadProgress?

    /// Asleep (state `S` or `D`) in `futex`: a lock, semaphore or condition wait.
    var isAsleepInFutex: Bool { isAsleep && activity == .blockedOnLock }
  }

  static func reading(of thread: ThreadID) -> Reading {
    let state = state(of: thread)
    return Reading(
      isAsleep: state == "S" || state == "D", activity: activity(of: thread).activity,
      progress: progress(of: thread))
  }

  /// One reading of `thread`'s state.
  static func activity(of thread: ThreadID) -> ThreadActivity {
    guard let state = state(of: thread) else { return ThreadActivity(activity: .unknown) }
    if state == "R" { return ThreadActivity(activity: .running) }
    guard let syscall = contents(of: "/proc/self/task/\(thread.rawValue)/syscall") else {
      return ThreadActivity(activity: .unknown)
    }
    if syscall.hasPrefix("running") { return ThreadActivity(activity: .running) }
    guard let number = syscall.split(separator: " ").first.flatMap({ Int($0) }), number >= 0
    else { return ThreadActivity(activity: .unknown) }
    return ThreadActivity(activity: SystemCall.activity(number))
  }

  /// The one-letter state in `/proc/self/task/<tid>/stat`: `R` running or runnable, `S` and `D`
  /// asleep, and others.
  private static func state(of thread: ThreadID) -> Character? {
    contents(of: "/proc/self/task/\(thread.rawValue)/stat")?
      .split(separator: ")").last?.split(separator: " ").first?.first
  }

  private static func contents(of path: String) -> String? {
    guard Settings.readsProc else { return nil }
    var descriptor: Int32
    repeat { descriptor = open(path, O_RDONLY) } while descriptor < 0 && errno == EINTR
    guard descriptor >= 0 else { return nil }
    // A failed close of a file only read loses nothing.
    defer { _ = close(descriptor) }
    var buffer = [UInt8](repeating: 0, count: 512)
    var count: Int
    repeat {
      count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
    } while count < 0 && errno == EINTR
    guard count > 0 else { return nil }
    return String(decoding: buffer.prefix(count), as: UTF8.self)
  }
}

/// System call numbers that tell what a blocked thread waits for.
private enum SystemCall {
  static func activity(_ number: Int) -> ThreadActivity.Activity {
    guard let name = names[number] else { return .inSystemCall("number \(number)") }
    switch name {
    case "futex", "futex_waitv": return .blockedOnLock
    case "nanosleep", "clock_nanosleep": return .sleeping
    case "poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait", "epoll_pwait2":
      return .polling(name)
    case "rt_sigsuspend", "pause": return .suspended
    default: return .inSystemCall(name)
    }
  }

  #if arch(x86_64)
    static let names: [Int: String] = [
      0: "read", 7: "poll", 23: "select", 34: "pause", 35: "nanosleep", 43: "accept",
      45: "recvfrom", 47: "recvmsg", 61: "wait4", 130: "rt_sigsuspend", 202: "futex",
      230: "clock_nanosleep", 232: "epoll_wait", 247: "waitid", 270: "pselect6", 271: "ppoll",
      281: "epoll_pwait", 288: "accept4", 441: "epoll_pwait2", 449: "futex_waitv",
    ]
  #elseif arch(arm64)
    static let names: [Int: String] = [
      22: "epoll_pwait", 63: "read", 72: "pselect6", 73: "ppoll", 95: "waitid", 98: "futex",
      101: "nanosleep", 115: "clock_nanosleep", 133: "rt_sigsuspend", 202: "accept",
      207: "recvfrom", 212: "recvmsg", 242: "accept4", 260: "wait4", 441: "epoll_pwait2",
      449: "futex_waitv",
    ]
  #else
    static let names: [Int: String] = [:]
  #endif
}
