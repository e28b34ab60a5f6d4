import Foundation
import MainOnceFixtureSupport
import Testing

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Runs a scenario binary built next to the test bundle, with a hard time limit (scaled, see
/// ``TimeScale``; the child gets the same time scale, for its own bounds).
///
/// The child is started with `posix_spawn` and reaped with `waitpid`, polled against a deadline;
/// past it, the child is killed with `SIGKILL`. Every wait here is bounded, and none depends on
/// Foundation noticing that a child ended (under ThreadSanitizer it sometimes does not).
struct FixtureProcess {
  struct Outcome {
    /// The exit status, or 128 + the signal that ended the process.
    let status: Int32
    let standardOutput: String
    let standardError: String
    let timedOut: Bool

    /// The `PASS`/`FAIL` line a fixture prints last.
    var verdict: String {
      standardOutput.split(separator: "\n").last(where: {
        $0.hasPrefix("PASS") || $0.hasPrefix("FAIL")
      }).map(String.init) ?? "(no verdict)"
    }

    /// The value of `key=` in the verdict line.
    func value(_ key: String) -> String? {
      verdict.split(separator: " ").first(where: { $0.hasPrefix(key + "=") })
        .map { String($0.dropFirst(key.count + 1)) }
    }
  }

  struct SpawnError: Error, CustomStringConvertible {
    let description: String
  }

  /// The directory that holds the fixture executables: next to the test bundle, or
  /// `MAINONCE_FIXTURE_DIRECTORY` (CI points it at a `--static-swift-stdlib` build).
  static let productsDirectory: URL = {
    if let directory = ProcessInfo.processInfo.environment["MAINONCE_FIXTURE_DIRECTORY"] {
      return URL(fileURLWithPath: directory)
    }
    return URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
      .deletingLastPathComponent()
  }()

  /// This test runner's own executable.
  static let testRunner = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path

  /// Runs `executable` (a product's name, or an absolute path) with `arguments` and
  /// `environment` added to this process's environment, for at most `timeout` times the time
  /// scale, which the child is given too.
  ///
  /// Crash backtraces are off unless `environment` turns them on: scenarios that stop the
  /// process only need its message, and the backtracer takes a while (and under
  /// ThreadSanitizer can hang).
  static func run(
    _ executable: String,
    _ arguments: [String],
    environment: [String: String] = [:],
    timeout: Duration = .seconds(30)
  ) async throws -> Outcome {
    let path =
      executable.hasPrefix("/")
      ? executable : productsDirectory.appendingPathComponent(executable).path
    let variables = ProcessInfo.processInfo.environment
      .merging(["SWIFT_BACKTRACE": "enable=no", TimeScale.variable: "\(TimeScale.factor)"]) {
        $1
      }
      .merging(environment) { $1 }
    let output = try ChildPipe()
    let error = try ChildPipe()
    let pid = try spawn(
      path, [path] + arguments, variables.map { "\($0.key)=\($0.value)" },
      output: output, error: error)
    let outputText = PipeReader(output.readEnd)
    let errorText = PipeReader(error.readEnd)
    // `reap` ends by the deadline (it kills the child past it); the extra time is a backstop.
    let (status, timedOut) =
      await onThread(timeout: timeout + .seconds(10)) {
        reap(pid, deadline: .now() + timeout.scaled.seconds)
      } ?? (-1, true)
    return Outcome(
      status: status,
      standardOutput: outputText.text(),
      standardError: errorText.text(),
      timedOut: timedOut)
  }

  /// Runs `MainOnceFixture <group> <name>`: one of the scenarios that need the main queue to
  /// themselves, such as `deadlock rawSemaphore`.
  static func scenario(
    _ group: String, _ name: String, environment: [String: String] = [:]
  ) async throws -> Outcome {
    try await run("MainOnceFixture", [group, name], environment: environment)
  }

  private static func spawn(
    _ path: String, _ arguments: [String], _ environment: [String], output: ChildPipe,
    error: ChildPipe
  ) throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_adddup2(&actions, output.writeEnd, 1)
    posix_spawn_file_actions_adddup2(&actions, error.writeEnd, 2)
    let argv = arguments.map { strdup($0) } + [nil]
    let envp = environment.map { strdup($0) } + [nil]
    defer { (argv + envp).forEach { free($0) } }
    var pid = pid_t()
    let status = posix_spawn(&pid, path, &actions, nil, argv, envp)
    // The child has its own copies of the write ends; closing ours lets the readers see EOF.
    close(output.writeEnd)
    close(error.writeEnd)
    guard status == 0 else {
      close(output.readEnd)
      close(error.readEnd)
      throw SpawnError(description: "cannot start \(path): \(String(cString: strerror(status)))")
    }
    return pid
  }

  /// Waits for `pid` until `deadline`, then kills it. Returns its status and whether it was
  /// killed for taking too long.
  private static func reap(_ pid: pid_t, deadline: DispatchTime) -> (Int32, Bool) {
    var status: Int32 = 0
    while waitpid(pid, &status, WNOHANG) == 0 {
      if DispatchTime.now() >= deadline {
        kill(pid, SIGKILL)
        // A killed child ends at once; this wait is bounded by the kernel, not by the child.
        waitpid(pid, &status, 0)
        return (exitStatus(status), true)
      }
      usleep(5_000)
    }
    return (exitStatus(status), false)
  }

  /// The exit code, or 128 + the signal, as a shell reports it.
  private static func exitStatus(_ status: Int32) -> Int32 {
    let signal = status & 0x7f
    return signal == 0 ? (status >> 8) & 0xff : 128 + signal
  }
}

/// A pipe's two file descriptors.
private struct ChildPipe {
  let readEnd: Int32
  let writeEnd: Int32

  init() throws {
    var ends: [Int32] = [0, 0]
    guard pipe(&ends) == 0 else {
      throw FixtureProcess.SpawnError(description: "pipe: \(String(cString: strerror(errno)))")
    }
    // Close-on-exec: only the descriptors duplicated onto 1 and 2 reach the child.
    for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
    (readEnd, writeEnd) = (ends[0], ends[1])
  }
}

/// Reads a pipe to its end on a thread of its own, so that a chatty child never blocks on a
/// full pipe.
private final class PipeReader: @unchecked Sendable {
  // This is safe because `data` is written by the reading thread before `done` is signalled and
  // read only after waiting for `done`.
  private var data = Data()
  private let done = DispatchSemaphore(value: 0)

  init(_ descriptor: Int32) {
    Thread {
      var buffer = [UInt8](repeating: 0, count: 65_536)
      while true {
        let count = read(descriptor, &buffer, buffer.count)
        if count > 0 {
          self.data.append(contentsOf: buffer[..<count])
        } else if count == 0 || errno != EINTR {
          break
        }
      }
      close(descriptor)
      self.done.signal()
    }.start()
  }

  /// What was read. The child has ended when this is called, so its end of the pipe is closed;
  /// the limit only guards against a grandchild that kept it open.
  func text() -> String {
    guard done.wait(timeout: .now() + TimeScale.seconds(10)) == .success else {
      return "(the output was still open \(TimeScale.seconds(10)) s after the process ended)"
    }
    return String(decoding: data, as: UTF8.self)
  }
}
