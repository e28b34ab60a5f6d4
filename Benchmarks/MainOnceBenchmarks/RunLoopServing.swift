import CBenchmarkSupport
import Dispatch
import Foundation
import MainOnce
import Synchronization

/// `MainOnceBenchmarks run-loop`: one program on a real GLib main loop, its main queue and
/// `RunLoop.main` served three ways, each in a process of its own (see ``DriverProcess``):
///
/// - `glibDriver`: one GLib source, `MainQueueDriver`'s descriptor and timeout (the article's
///   recipe);
/// - `glibTickler`: a GLib timeout every 50 ms that runs one pass of `RunLoop.main`, which
///   drains the main queue too (what Swift GUI frameworks on Linux do under GTK);
/// - `runLoop`: `RunLoop.main.run()` alone, for reference.
///
/// In each, a worker measures how long a `DispatchQueue.main.async` block and a `@MainActor`
/// task wait to run, submitted at random moments (one at a time, each a random 0–50 ms after the
/// one before ran: one tick period, so that a submission falls anywhere between two ticks); how
/// late a `Timer` of 100 ms scheduled from the main queue fires (plus a random 0–50 ms: under the
/// tickler, a main-queue block runs at a tick, and a due time two ticks later would fall on one);
/// and, with nothing to do but a `Timer` due in a minute, how often the main thread wakes up and
/// how much CPU time the process uses.
enum RunLoopServing {
  static let servers = ["glibDriver", "glibTickler", "runLoop"]
  /// The tickler's period.
  static let tickMilliseconds: UInt32 = 50

  struct Result: Codable {
    let server: String
    /// Milliseconds from submitting to running, one sample per submission.
    let mainQueue: Latency
    let mainActor: Latency
    /// Milliseconds past its due time at which a 100 ms timer fired.
    let timerLateness: Latency
    /// Nanoseconds an idle `MainQueueDriver.drain()` takes (nothing pending, no timer due), and a
    /// `read` of an empty pipe, one system call like the drain's reset of its descriptor: under
    /// `glibDriver` only.
    let idleDrainNanoseconds: Double?
    let emptyReadNanoseconds: Double?
    let idleSeconds: Double
    /// The main thread's voluntary context switches per idle second.
    let idleWakeUpsPerSecond: Double
    /// The process's CPU time over the idle seconds, in milliseconds.
    let idleCPUMilliseconds: Double
  }

  /// Median, 95th percentile and worst of some samples, in milliseconds.
  struct Latency: Codable {
    let median: Double
    let p95: Double
    let worst: Double
    let samples: [Double]

    init(_ samples: [Double]) {
      let sorted = samples.sorted()
      func at(_ fraction: Double) -> Double {
        sorted.isEmpty ? .nan : sorted[Int((Double(sorted.count - 1) * fraction).rounded(.up))]
      }
      (median, p95, worst, self.samples) = (at(0.5), at(0.95), at(1), samples)
    }
  }

  /// Serves the main queue and `RunLoop.main` with a GLib `server` on the main thread, for ever
  /// (``DriverProcess`` runs `runLoop` itself).
  static func runGLib(_ server: String) -> Never {
    switch server {
    case "glibTickler":
      guard bench_glib_load() else { cannotLoadGLib() }
      bench_glib_run_with_tickler(tickMilliseconds) {
        _ = RunLoop.main.run(mode: .default, before: .distantPast)
      }
    default:
      guard bench_glib_load() else { cannotLoadGLib() }
      timeIdleDrains()
      bench_glib_run_with_source(
        MainQueueDriver.fileDescriptor, { MainQueueDriver.timeoutMilliseconds },
        { MainQueueDriver.drain() })
    }
    fatalError("the \(server) loop returned")
  }

  /// What ``timeIdleDrains()`` measured, and when it is done: the worker waits for it.
  private static let idleDrains = Recorded<(drain: Double, read: Double)>()
  private static let idleDrainsTimed = DispatchSemaphore(value: 0)

  /// Times idle drains on the main thread, before the loop runs and before the worker submits
  /// anything; and, for comparison, a `read` of an empty non-blocking pipe: one system call, as
  /// the drain's reset of its eventfd is.
  private static func timeIdleDrains() {
    let count = 20_000
    var pipeEnds: [Int32] = [0, 0]
    _ = pipe(&pipeEnds)
    _ = fcntl(pipeEnds[0], F_SETFL, O_NONBLOCK)
    func nanosecondsEach(_ body: () -> Void) -> Double {
      for _ in 0..<1_000 { body() }
      let start = ContinuousClock.now
      for _ in 0..<count { body() }
      return milliseconds(.now - start) * 1e6 / Double(count)
    }
    var value: UInt64 = 0
    let drain = nanosecondsEach { MainQueueDriver.drain() }
    let read = nanosecondsEach { _ = Foundation.read(pipeEnds[0], &value, 8) }
    pipeEnds.forEach { close($0) }
    idleDrains.set((drain, read))
    idleDrainsTimed.signal()
  }

  private static func cannotLoadGLib() -> Never {
    FileHandle.standardError.write(Data("libglib-2.0.so.0 cannot be loaded\n".utf8))
    exit(1)
  }

  /// The child side, on a worker thread while `server` serves the main thread.
  static func measure(server: String, quick: Bool) -> Result {
    let submissions = quick ? 40 : 300
    let timers = quick ? 5 : 30
    let idleSeconds = quick ? 3.0 : 10.0
    if server == "glibDriver" { idleDrainsTimed.wait() }
    // Warm up: the main queue, the main actor's executor, Foundation's timers.
    _ = latencies(10, submit: submitToMainQueue)
    _ = latencies(10, submit: submitToMainActor)
    _ = timerLatenesses(1)
    let mainQueue = latencies(submissions, submit: submitToMainQueue)
    let mainActor = latencies(submissions, submit: submitToMainActor)
    let lateness = timerLatenesses(timers)
    let (wakeUps, cpu) = idle(seconds: idleSeconds)
    return Result(
      server: server, mainQueue: Latency(mainQueue), mainActor: Latency(mainActor),
      timerLateness: Latency(lateness), idleDrainNanoseconds: idleDrains.value?.drain,
      emptyReadNanoseconds: idleDrains.value?.read, idleSeconds: idleSeconds,
      idleWakeUpsPerSecond: wakeUps / idleSeconds, idleCPUMilliseconds: cpu)
  }

  private static func submitToMainQueue(_ ran: @escaping @Sendable () -> Void) {
    DispatchQueue.main.async { ran() }
  }

  private static func submitToMainActor(_ ran: @escaping @Sendable () -> Void) {
    Task { @MainActor in ran() }
  }

  /// A random pause of up to one tick period.
  private static func pause() { usleep(UInt32.random(in: 0..<tickMilliseconds * 1_000)) }

  /// `count` submissions, each once the one before has run and a random pause later: the
  /// milliseconds each waited to run.
  private static func latencies(
    _ count: Int, submit: (@escaping @Sendable () -> Void) -> Void
  ) -> [Double] {
    (0..<count).map { _ in
      pause()
      let ranAt = Recorded<ContinuousClock.Instant>()
      let done = DispatchSemaphore(value: 0)
      let submitted = ContinuousClock.now
      submit {
        ranAt.set(.now)
        done.signal()
      }
      guard done.wait(timeout: .now() + 10) == .success else { stuck("a submission") }
      return milliseconds(ranAt.value! - submitted)
    }
  }

  /// `count` timers of 100 ms and a random part of a tick period, each scheduled from a
  /// main-queue block once the one before has fired and a random pause later: the milliseconds
  /// each fired past its due time.
  private static func timerLatenesses(_ count: Int) -> [Double] {
    (0..<count).map { _ in
      pause()
      let lateness = Recorded<Double>()
      let fired = DispatchSemaphore(value: 0)
      let interval = 100 + Double.random(in: 0..<Double(tickMilliseconds))
      DispatchQueue.main.async {
        let scheduled = ContinuousClock.now
        _ = Timer.scheduledTimer(withTimeInterval: interval / 1_000, repeats: false) { _ in
          lateness.set(milliseconds(.now - scheduled) - interval)
          fired.signal()
        }
      }
      guard fired.wait(timeout: .now() + 10) == .success else { stuck("a timer") }
      return lateness.value!
    }
  }

  /// With a `Timer` due in a minute and nothing else to do, over `seconds`: how often the main
  /// thread woke up and how much CPU time the process used, in milliseconds.
  private static func idle(seconds: Double) -> (wakeUps: Double, cpuMilliseconds: Double) {
    let scheduled = DispatchSemaphore(value: 0)
    DispatchQueue.main.async {
      _ = Timer.scheduledTimer(withTimeInterval: 60, repeats: false) { _ in }
      scheduled.signal()
    }
    guard scheduled.wait(timeout: .now() + 10) == .success else { stuck("the idle timer") }
    // Once the loop waits again: the switches it took to get there are not idle ones.
    usleep(500_000)
    let (switches, cpu) = (mainThreadSwitches(), processCPUMilliseconds())
    usleep(UInt32(seconds * 1_000_000))
    return (Double(mainThreadSwitches() - switches), processCPUMilliseconds() - cpu)
  }

  /// The main thread's `voluntary_ctxt_switches` (its id is the process's).
  private static func mainThreadSwitches() -> Int {
    let path = "/proc/self/task/\(getpid())/status"
    let status = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    let line = status.split(separator: "\n").first { $0.hasPrefix("voluntary_ctxt_switches:") }
    return line.flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) }
      ?? 0
  }

  private static func processCPUMilliseconds() -> Double {
    var time = timespec()
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time)
    return Double(time.tv_sec) * 1_000 + Double(time.tv_nsec) / 1e6
  }

  private static func milliseconds(_ duration: Duration) -> Double {
    let (seconds, attoseconds) = duration.components
    return Double(seconds) * 1_000 + Double(attoseconds) / 1e15
  }

  private static func stuck(_ what: String) -> Never {
    FileHandle.standardError.write(Data("\(what) did not run within 10 s\n".utf8))
    exit(1)
  }
}

/// A value one thread records and another reads once it has been told.
private final class Recorded<Value: Sendable>: Sendable {
  private let recorded = Mutex<Value?>(nil)

  var value: Value? { recorded.withLock { $0 } }

  func set(_ value: Value) { recorded.withLock { $0 = value } }
}
