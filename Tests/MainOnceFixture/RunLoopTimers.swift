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
  /// main-queue block, and a `RunLoop.main.perform` block; prints how long after scheduling
  /// each timer fired (`timer=`, `fromMainQueue=`, in ms) and whether the block ran
  /// (`perform=`). The first timer's callback gives a `perform` block and drains: that drain
  /// must run no pass (`nestedPass=none`), and a later one the block (`performFromTimer=`).
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

  /// Milliseconds since `start`.
  private static func milliseconds(since start: ContinuousClock.Instant) -> Double {
    let (seconds, attoseconds) = (ContinuousClock.now - start).components
    return Double(seconds) * 1_000 + Double(attoseconds) / 1e15
  }

  private func scheduleTimers() {
    let measured = Locked<[String: String]>([:])
    let scheduled = ContinuousClock.now
    _ = Timer.scheduledTimer(withTimeInterval: 0.1, repeats: false) { _ in
      let elapsed = Self.milliseconds(since: scheduled)
      measured.withLock { $0["timer"] = String(format: "%.1f", elapsed) }
      // A drain in a timer's callback runs no pass of its own: the block waits for the next.
      RunLoop.main.perform { measured.withLock { $0["performFromTimer"] = "ran" } }
      MainQueueDriver.drain()
      measured.withLock { $0["nestedPass"] = $0["performFromTimer"] == nil ? "none" : "ran" }
    }
    RunLoop.main.perform { measured.withLock { $0["perform"] = "ran" } }
    DispatchQueue.main.async {
      let queued = ContinuousClock.now
      _ = Timer.scheduledTimer(withTimeInterval: 0.1, repeats: false) { _ in
        let elapsed = Self.milliseconds(since: queued)
        measured.withLock { $0["fromMainQueue"] = String(format: "%.1f", elapsed) }
      }
    }
    Thread {
      let all = waitUntil(timeout: .seconds(5)) { measured.withLock { $0.count } == 5 }
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
      if Glibc.poll(&events, 1, MainQueueDriver.timeoutMilliseconds) < 0 && errno != EINTR {
        fatalError("poll: \(errno)")
      }
      MainQueueDriver.drain()
    }
  }
}
