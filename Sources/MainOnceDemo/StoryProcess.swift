import Foundation

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// A diagnostic story runs in a child process of the demo, so that what it prints ends with
/// MainOnce's message.
///
/// MainOnce stops a process with `fatalError`, and the Swift runtime then prints a report of the
/// crash that buries the message: its backtracer's threads, registers and images, or, with the
/// backtracer off (`SWIFT_BACKTRACE=enable=no`), in a debug build such as `swift run` makes, a
/// "Current stack trace". The runtime reads `SWIFT_BACKTRACE` when it starts, so setting it from
/// `main` changes nothing. So the demo runs the story in a child, started with the backtracer
/// off, and shows what the child prints up to the runtime's report.
enum StoryProcess {
  /// Set in the child's environment: there, the story runs.
  private static let childVariable = "MAINONCE_DEMO_STORY_CHILD"

  /// The longest a story may take; they end in a few seconds.
  private static let limit = 60.0

  /// In the child, runs `story`; otherwise runs this executable with `arguments` as the child,
  /// shows what it prints, and exits with its status.
  static func run(_ arguments: [String], _ story: () -> Never) -> Never {
    if ProcessInfo.processInfo.environment[childVariable] != nil { story() }
    exit(runChild(arguments))
  }

  /// Runs this executable with `arguments` as the child of a story, with the Swift runtime's
  /// backtracer off, and copies its standard error to this process's up to the runtime's report.
  /// The child writes its standard output here itself, so that what it prints keeps its order
  /// (the runtime's report goes to standard error only). Returns its exit status, or 128 + the
  /// signal that ended it, as a shell reports it.
  ///
  /// The child is started with `posix_spawn` and reaped with `waitpid`, polled against a
  /// deadline: no wait depends on Foundation noticing that a child ended (under
  /// ThreadSanitizer it sometimes does not).
  static func runChild(_ arguments: [String]) -> Int32 {
    let environment = ProcessInfo.processInfo.environment.merging(
      [childVariable: "1", "SWIFT_BACKTRACE": "enable=no"]
    ) { $1 }
    var error: [Int32] = [0, 0]
    guard pipe(&error) == 0 else {
      say("cannot make a pipe: \(String(cString: strerror(errno)))")
      return 1
    }
    // Close-on-exec: only the end duplicated onto 2 reaches the child.
    for end in error { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_adddup2(&actions, error[1], 2)
    let argv = ([CommandLine.arguments[0]] + arguments).map { strdup($0) } + [nil]
    let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer { (argv + envp).forEach { free($0) } }
    var pid = pid_t()
    // This executable, wherever it was started from.
    let started = posix_spawn(&pid, "/proc/self/exe", &actions, nil, argv, envp)
    // The child has its own copy of the write end; closing ours lets the copy see the end.
    close(error[1])
    let copied = DispatchGroup()
    copy(error[0], to: STDERR_FILENO, group: copied)
    guard started == 0 else {
      say("cannot start the story: \(String(cString: strerror(started)))")
      return 1
    }
    var status: Int32 = 0
    let deadline = DispatchTime.now() + limit
    while waitpid(pid, &status, WNOHANG) == 0 {
      if DispatchTime.now() >= deadline {
        kill(pid, SIGKILL)
        waitpid(pid, &status, 0)
        say("the story did not end within \(Int(limit)) s: stopped")
        return 1
      }
      usleep(10_000)
    }
    // The child is gone, so its end of the pipe is closed: the copy ends at once.
    _ = copied.wait(timeout: .now() + 10)
    let signal = status & 0x7f
    return signal == 0 ? (status >> 8) & 0xff : 128 + signal
  }

  /// Copies `source` to `destination` line by line, on a thread of its own, up to the first line
  /// of the runtime's report of a crash, and reads the rest without showing it.
  private static func copy(_ source: Int32, to destination: Int32, group: DispatchGroup) {
    group.enter()
    Thread {
      defer {
        close(source)
        group.leave()
      }
      var pending: [UInt8] = []
      var inReport = false
      var buffer = [UInt8](repeating: 0, count: 65_536)
      while true {
        let count = read(source, &buffer, buffer.count)
        if count < 0, errno == EINTR { continue }
        guard count > 0 else { break }
        guard !inReport else { continue }
        pending += buffer[..<count]
        while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
          let line = Array(pending[...newline])
          pending.removeFirst(newline + 1)
          if startsReport(line) {
            inReport = true
            break
          }
          writeAll(line, to: destination)
        }
      }
      if !inReport { writeAll(pending, to: destination) }
    }.start()
  }

  /// Writes every byte of `bytes` to `descriptor`.
  private static func writeAll(_ bytes: [UInt8], to descriptor: Int32) {
    var written = 0
    while written < bytes.count {
      let count = bytes[written...].withUnsafeBytes {
        write(descriptor, $0.baseAddress, $0.count)
      }
      if count < 0, errno == EINTR { continue }
      guard count > 0 else { return }
      written += count
    }
  }

  /// Whether `line` opens the runtime's report of a crash: the stack trace it prints with the
  /// backtracer off, or the backtracer's first line (`*** Signal 4: Backtracing…`).
  private static func startsReport(_ line: [UInt8]) -> Bool {
    let text = String(decoding: line, as: UTF8.self)
    return text.hasPrefix("Current stack trace:") || text.hasPrefix("*** ")
  }
}
