internal import Synchronization
internal import _CMainOnceShims

#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Musl)
  internal import Musl
#elseif canImport(Darwin)
  internal import Darwin
#endif

/// Serves the main queue from an event loop of your own on the main thread: GLib, SDL, libuv,
/// or a plain `poll` loop.
///
/// A program that runs its own loop on the main thread never serves the main queue: no
/// `DispatchQueue.main.async` block, no `@MainActor` task and no MainOnce hop runs, because
/// only `dispatchMain()` and `RunLoop.main.run()` drain it; and no `Timer` on `RunLoop.main`
/// fires. The driver gives any loop what Foundation's `RunLoop` uses on Linux: a file
/// descriptor that becomes readable when the main queue has work, how long the loop may wait
/// before the main run loop's next timer is due, and a call that runs both.
///
/// ```swift
/// func runEventLoop() {  // on the main thread, instead of dispatchMain()
///   var events = [pollfd(fd: MainQueueDriver.fileDescriptor, events: Int16(POLLIN), revents: 0)]
///   while true {
///     _ = poll(&events, 1, MainQueueDriver.timeoutMilliseconds)
///     MainQueueDriver.drain()
///   }
/// }
/// ```
///
/// With the driver, the loop is to MainOnce what `RunLoop.main.run()` is: the main thread holds
/// the main queue, so initializers run there, in main context, on the main thread; hops reach
/// it; and a stall report explains a loop that stops draining. The article
/// <doc:ServingTheMainQueue> has recipes for GLib, SDL, `poll`/`epoll` and libuv.
///
/// ## The main run loop
///
/// Where the program links Foundation, ``drain(file:line:)`` also runs one pass of
/// `RunLoop.main` in its default mode, after the main queue's work: the timers that are due,
/// the blocks given to `RunLoop.main.perform`, and the sources that are ready.
/// ``timeoutMilliseconds`` says when the next timer is due. A timer scheduled, or a `perform`
/// block given, on the main thread (in a main-queue block, an initializer, a timer's own
/// callback) is seen at the loop's next wait. One scheduled on `RunLoop.main` from another
/// thread is not: CoreFoundation wakes only its own descriptors, so it runs at the loop's next
/// wake-up, which may be much later. Schedule it from the main queue instead:
/// `DispatchQueue.main.async { Timer.scheduledTimer(…) }`. Other run-loop modes are not run.
///
/// Linux only, with libdispatch's run-loop entry points; elsewhere ``fileDescriptor`` is -1.
public enum MainQueueDriver {
  /// A file descriptor that becomes readable whenever the main queue has work.
  ///
  /// Watch it for input in your loop (level-triggered: `poll`, `epoll` without `EPOLLET`,
  /// `g_unix_fd_add`, `uv_poll_start`), and call ``drain(file:line:)`` when it is readable. Do
  /// not read from it, and do not close it: ``drain(file:line:)`` resets it.
  ///
  /// The descriptor is valid for the life of the process. It is -1 if the main queue is no
  /// longer bound to the main thread when first asked (after `dispatchMain()`), or on a
  /// platform without libdispatch's run-loop entry points.
  public static var fileDescriptor: Int32 { descriptor }

  /// Runs the main queue's pending work on the main thread, then what is due on the main run
  /// loop, then returns.
  ///
  /// Call it when ``fileDescriptor`` is readable, when ``timeoutMilliseconds`` has passed, or
  /// once per frame. It first resets the descriptor, then runs the blocks that were pending when
  /// it started; blocks submitted meanwhile make the descriptor readable again. Then, where the
  /// program links Foundation, it runs one pass of `RunLoop.main` in its default mode, which
  /// waits for nothing: its due timers, its `perform` blocks and its ready sources. The main
  /// queue's work always comes first, so a loop's latency for it is what it was without the
  /// run loop. With nothing pending it costs a system call and, with Foundation, a run-loop pass
  /// that waits for nothing.
  ///
  /// A call from inside a main-queue block runs nothing: libdispatch never drains the main
  /// queue re-entrantly. A call from a timer's callback or a `perform` block drains the main
  /// queue but runs no pass: MainOnce never runs one inside another drain's work. Either resets
  /// the descriptor, which is harmless: the drain in progress makes it readable again when it
  /// ends with work left.
  ///
  /// Legal only on the main thread while the main queue is bound to it, that is, before
  /// `dispatchMain()` is called. Anywhere else MainOnce stops the process with a message that
  /// names the call site (libdispatch would trap without one).
  ///
  /// - Parameters:
  ///   - file: The caller's file, for the misuse message; leave the default.
  ///   - line: The caller's line, for the misuse message; leave the default.
  public static func drain(file: StaticString = #fileID, line: UInt = #line) {
    if let problem = drainProblem() {
      let site = CallSite(file: file, line: line)
      Diagnostics.fail(
        "MainOnce: MainQueueDriver.drain() at \(site) was called \(problem). It runs the main"
          + " queue's work on the main thread, so it is legal only there, and only while the main"
          + " queue is bound to it, before dispatchMain().",
        at: site)
    }
    var count: UInt64 = 0
    // Reset first: blocks submitted during the drain write the descriptor again. The result is
    // not needed: an eventfd read either resets the counter or finds it reset already
    // (EAGAIN); and a read interrupted by a signal (EINTR) leaves the descriptor readable, so
    // the loop only comes back here once more.
    _ = read(descriptor, &count, MemoryLayout<UInt64>.size)
    QueueOwnership.driverDrains.add(1, ordering: .relaxed)
    let isNested = isDraining
    isDraining = true
    defer { isDraining = isNested }
    mainonce_main_queue_drain()
    if !isNested { MainRunLoop.pass() }
  }

  /// How long the loop may wait, in milliseconds, before `RunLoop.main` has a timer due: 0 if
  /// one is due now, -1 if none is scheduled or the program does not link Foundation. Rounded
  /// up, so that a loop that wakes after it finds the timer due. In the units `poll`,
  /// `epoll_wait`, a GLib source's `prepare`, `SDL_WaitEventTimeout` and `uv_timer_start` take.
  ///
  /// Ask it on the main thread, each time before the loop waits: a drain may have scheduled a
  /// timer, and a timer's fire date moves when it fires. Off the main thread it is -1.
  public static var timeoutMilliseconds: Int32 {
    ThreadRecord.current.isMainThread ? MainRunLoop.millisecondsToNextTimer : -1
  }

  /// Whether a drain runs on the main thread right now: a drain inside it runs no run-loop pass.
  // nonisolated(unsafe): only the main thread reads or writes it, in `drain`, after checking
  // that it runs there.
  nonisolated(unsafe) private static var isDraining = false

  /// A duplicate of libdispatch's descriptor, close-on-exec: libdispatch closes its own when
  /// `dispatchMain()` unbinds the main queue, and the number could then name another file.
  private static let descriptor: Int32 = {
    let handle = mainonce_main_queue_handle()
    guard handle >= 0 else { return -1 }
    let duplicate = fcntl(handle, F_DUPFD_CLOEXEC, 0)
    if duplicate < 0 {
      DeadlockReport.warning(
        "MainOnce: cannot duplicate libdispatch's main-queue descriptor (errno \(errno));"
          + " MainQueueDriver cannot serve the main queue"
      ).deliver(at: nil)
    }
    return duplicate
  }()

  /// Why draining here is not legal, or `nil` if it is.
  private static func drainProblem() -> String? {
    let thread = ThreadRecord.current
    guard thread.isMainThread else {
      return "on \(thread.id), which is not the main thread"
    }
    guard QueueOwnership.isMainQueueBoundToMainThread else {
      return "after dispatchMain(), which serves the main queue from worker threads for good"
    }
    guard descriptor >= 0 else {
      return "where libdispatch offers no run-loop entry points"
    }
    return nil
  }
}
