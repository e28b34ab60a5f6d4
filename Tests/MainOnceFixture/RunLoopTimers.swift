import Dispatch
import Foundation
import MainOnce
import MainOnceFixtureSupport

#if canImport(Glibc)
  import Glibc
#endif

/// `RunLoop.main` under an event loop of the program's own that `MainQueueDriver` serves:
/// `MainOnceFixture runLoopTimers <scenario>`. The loop waits for the driver's descriptor for
/// at most `MainQueueDriver.timeoutMilliseconds`, and drains when it wakes. Prints `PASS …`
/// with what it measured, or `SKIP …` when GLib cannot be loaded.
enum RunLoopTimerScenario: String, CaseIterable {
  /// A `poll` loop: a 100 ms `Timer` scheduled on the main thread, one scheduled from a
  /// main-queue block, and a `RunLoop.main.perform` block. For each timer (`timer`,
  /// `fromMainQueue`) it prints how long after scheduling it fired (`…=` ms), how many of the
  /// loop's waits before it fired were given a timeout that ran past its due time
  /// (`…LateWaits=`), and how many drains that began after its due time ended without firing
  /// it (`…MissedDrains=`): what the driver decides, whatever the machine's load does to the
  /// loop's wake-ups. Whether the block ran: `perform=`. The first timer's callback gives a
  /// `perform` block and drains: that drain must run no pass (`nestedPass=none`), and a later
  /// one the block (`performFromTimer=`).
  case poll
  /// The same under a GLib main loop, served by one `GSource`.
  case glib
  /// A `poll` loop with nothing to do but a `Timer` due in a minute: prints how often the main
  /// thread woke up in 3 s (`wakeUps=`).
  case pollIdle
  /// The same under a GLib main loop.
  case glibIdle

  func run() -> Never {
    Watchdog.start(seconds: 20)
    let usesGLib = self == .glib || self == .glibIdle
    let glib = usesGLib ? GLib.load() : nil
    if usesGLib && glib == nil {
      print("SKIP libglib-2.0.so.0 cannot be loaded: \(String(cString: dlerror()))")
      exit(0)
    }
    switch self {
    case .poll, .glib: scheduleTimers()
    case .pollIdle, .glibIdle: countIdleWakeUps()
    }
    if let glib { glib.runServingRunLoop() }
    pollLoop()
  }

  /// Milliseconds from `start` to `end`.
  static func milliseconds(from start: ContinuousClock.Instant, to end: ContinuousClock.Instant)
    -> Double
  {
    let (seconds, attoseconds) = (end - start).components
    return Double(seconds) * 1_000 + Double(attoseconds) / 1e15
  }

  private func scheduleTimers() {
    let measured = Locked<[String: String]>([:])
    let loop = LoopRecord.shared
    /// Schedules a 100 ms timer that, when it fires, records what the loop did until then.
    @Sendable func schedule(_ name: String, then body: @escaping @Sendable () -> Void = {}) {
      let before = ContinuousClock.now
      _ = Timer.scheduledTimer(withTimeInterval: 0.1, repeats: false) { _ in
        let fired = ContinuousClock.now
        let facts = loop.facts(since: before, due: loop.scheduled(name) + .milliseconds(100))
        measured.withLock {
          $0[name] = String(format: "%.1f", Self.milliseconds(from: before, to: fired))
          $0[name + "LateWaits"] = String(facts.lateWaits)
          $0[name + "MissedDrains"] = String(facts.missedDrains)
        }
        body()
      }
      loop.markScheduled(name)
    }
    schedule("timer") {
      // A drain in a timer's callback runs no pass of its own: the block waits for the next.
      RunLoop.main.perform { measured.withLock { $0["performFromTimer"] = "ran" } }
      MainQueueDriver.drain()
      measured.withLock { $0["nestedPass"] = $0["performFromTimer"] == nil ? "none" : "ran" }
    }
    RunLoop.main.perform { measured.withLock { $0["perform"] = "ran" } }
    DispatchQueue.main.async { schedule("fromMainQueue") }
    Thread {
      let all = waitUntil(timeout: .seconds(5)) { measured.withLock { $0.count } == 9 }
      let fields = measured.withLock { $0 }.sorted { $0.key < $1.key }
        .map { "\($0.key)=\($0.value)" }.joined(separator: " ")
      verdict(all, fields)
    }.start()
  }

  private func countIdleWakeUps() {
    _ = Timer.scheduledTimer(withTimeInterval: 60, repeats: false) { _ in
      print("FAIL the timer due in a minute fired")
      exit(1)
    }
    let mainThread = KernelThread.current
    Thread {
      // Once the loop waits: the switches it took to get there are not idle ones.
      Thread.sleep(forTimeInterval: TimeScale.seconds(0.5))
      let before = KernelThread.voluntarySwitches(of: mainThread)
      Thread.sleep(forTimeInterval: 3)
      let after = KernelThread.voluntarySwitches(of: mainThread)
      guard let before, let after else { verdict(false, "cannot read the main thread's status") }
      verdict(true, "wakeUps=\(after - before)")
    }.start()
  }

  /// Polls the driver's descriptor for ever, for at most the driver's timeout each time, and
  /// drains whenever it wakes.
  private func pollLoop() -> Never {
    var events = [pollfd(fd: MainQueueDriver.fileDescriptor, events: Int16(POLLIN), revents: 0)]
    while true {
      let timeout = LoopRecord.shared.waits(MainQueueDriver.timeoutMilliseconds)
      if Glibc.poll(&events, 1, timeout) < 0 && errno != EINTR { fatalError("poll: \(errno)") }
      LoopRecord.shared.drains()
      MainQueueDriver.drain()
    }
  }
}

/// What a loop served by the driver did, in order: when each of its waits began and the timeout
/// it was given, and when each drain began. Written by the loop on the main thread, read there
/// by a timer's callback.
final class LoopRecord: Sendable {
  static let shared = LoopRecord()

  private struct Wait {
    var start: ContinuousClock.Instant
    var timeout: Int32
  }
  private struct State {
    var waits: [Wait] = []
    var drains: [ContinuousClock.Instant] = []
    var scheduled: [String: ContinuousClock.Instant] = [:]
  }
  private let state = Locked(State())

  /// The loop is about to wait for at most `timeout` ms (-1: for ever); returns `timeout`.
  /// The time is read first, so that a wait's end is never earlier than recorded.
  func waits(_ timeout: @autoclosure () -> Int32) -> Int32 {
    let start = ContinuousClock.now
    let timeout = timeout()
    state.withLock { $0.waits.append(Wait(start: start, timeout: timeout)) }
    return timeout
  }

  /// The loop is about to drain.
  func drains() {
    let start = ContinuousClock.now
    state.withLock { $0.drains.append(start) }
  }

  /// The timer `name` has just been scheduled: it is due at most 100 ms from now.
  func markScheduled(_ name: String) {
    let now = ContinuousClock.now
    state.withLock { $0.scheduled[name] = now }
  }

  func scheduled(_ name: String) -> ContinuousClock.Instant {
    state.withLock { $0.scheduled[name]! }
  }

  /// For a timer scheduled at `since`, due at the latest at `due`, firing now: how many of the
  /// loop's waits since then were given a timeout that ran past `due`, or past their start once
  /// `due` had passed (one for ever included),
  /// and how many drains that began after `due` ended without firing it (the current one fires
  /// it). A timeout is rounded up to a millisecond; a drain may begin a quarter of one after
  /// `due` for the clocks' reads (CoreFoundation reads `CLOCK_MONOTONIC` inside
  /// `Timer.scheduledTimer`, before `due` is taken).
  func facts(since: ContinuousClock.Instant, due: ContinuousClock.Instant)
    -> (lateWaits: Int, missedDrains: Int)
  {
    state.withLock { state in
      let late = state.waits.filter { wait in
        wait.start >= since
          && (wait.timeout < 0
            || wait.start + .milliseconds(wait.timeout)
              > max(wait.start, due) + .milliseconds(1))
      }
      let missed = state.drains.dropLast().filter { $0 > due + .microseconds(250) }
      return (late.count, missed.count)
    }
  }
}
