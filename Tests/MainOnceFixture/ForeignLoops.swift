import Dispatch
import Foundation
import MainOnce
import MainOnceFixtureSupport
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// An event loop that is not Dispatch's runs on the main thread and serves the main queue with
/// `MainQueueDriver`: `MainOnceFixture foreignLoop <loop>`. Worker threads race
/// `onceOnMain`, read a `MainLazy`, start `@MainActor` tasks and submit `DispatchQueue.main`
/// blocks; every one must be served, on the main thread. Prints `PASS …`, `FAIL …`, or
/// `SKIP …` when GLib cannot be loaded.
enum ForeignLoop: String, CaseIterable {
  /// A `poll` loop over the driver's descriptor and a pipe.
  case poll
  /// A GLib main loop, `libglib-2.0.so.0` loaded with `dlopen`, the descriptor added with
  /// `g_unix_fd_add`.
  case glib
  /// A `poll` loop that drains once, then waits 1.6 s (scaled) on a pipe alone while a worker
  /// waits for an initializer, then drains again: the watchdog must name the loop.
  case stopsDraining
  /// The descriptor is asked for before `dispatchMain()`: it must still be valid after it.
  case descriptorLifetime
  /// Work makes the descriptor readable; `drain()` runs it and resets the descriptor, so that a
  /// level-triggered loop does not spin.
  case drainResets

  enum Values {
    static let stack = MainLazy { MainThreadCheck() }
  }

  func run() -> Never {
    Watchdog.start(seconds: 20)
    switch self {
    case .stopsDraining: stopDraining()
    case .descriptorLifetime: checkDescriptorLifetime()
    case .drainResets: checkDrainResets()
    case .poll, .glib: break
    }
    let glib = self == .glib ? GLib.load() : nil
    if self == .glib && glib == nil {
      print("SKIP libglib-2.0.so.0 cannot be loaded: \(String(cString: dlerror()))")
      exit(0)
    }
    let probe = Probe()
    let offMain = Tally()
    let served = DispatchGroup()
    probe.race(threads: 8, group: served)
    for _ in 0..<4 {
      served.enter()
      Thread {
        if !Values.stack.value.builtOnMainThread { offMain.add("offMain") }
        DispatchQueue.main.async {
          if !Thread.isMainThread { offMain.add("offMain") }
          Task { @MainActor in
            if !Thread.isMainThread { offMain.add("offMain") }
            served.leave()
          }
        }
      }.start()
    }
    served.notify(queue: .global()) { @Sendable in
      let wrongThread = offMain["offMain"]
      guard wrongThread == 0 else {
        probe.fail("\(wrongThread) main-queue jobs ran off the main thread")
      }
      probe.finish(driver: .mainQueueDriver, context: .background)
    }
    if let glib {
      glib.run()
    } else {
      pollLoop()
    }
  }

  private func stopDraining() -> Never {
    DispatchQueue.main.async { print("drained once") }
    MainQueueDriver.drain()
    Thread {
      onceOnMain(token: Tokens.token) {}
      verdict(true, "the worker's call returned")
    }.start()
    // A loop that forgot the driver's descriptor, long enough for the watchdog to name it.
    idleInPoll(milliseconds: Int32(TimeScale.seconds(1.6) * 1_000))
    pollLoop()
  }

  private func checkDescriptorLifetime() -> Never {
    let descriptor = MainQueueDriver.fileDescriptor
    // Runs once `dispatchMain()` serves the main queue.
    DispatchQueue.main.async {
      var link = [CChar](repeating: 0, count: 256)
      let length = readlink("/proc/self/fd/\(descriptor)", &link, link.count - 1)
      let target =
        length > 0
        ? String(decoding: link[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        : "nothing"
      let valid = MainQueueDriver.fileDescriptor == descriptor && target == "anon_inode:[eventfd]"
      verdict(valid, "descriptor=\(descriptor) names \(target) after dispatchMain()")
    }
    dispatchMain()
  }

  private func checkDrainResets() -> Never {
    var events = [pollfd(fd: MainQueueDriver.fileDescriptor, events: Int16(POLLIN), revents: 0)]
    func readable() -> Bool {
      events[0].revents = 0
      return Glibc.poll(&events, 1, 0) == 1 && events[0].revents & Int16(POLLIN) != 0
    }
    let ran = Locked(false)
    DispatchQueue.main.async { ran.withLock { $0 = true } }
    let before = readable()
    MainQueueDriver.drain()
    let after = readable()
    let didRun = ran.withLock { $0 }
    let passed = before && didRun && !after
    verdict(passed, "readableWithWork=\(before) ran=\(didRun) readableAfterDrain=\(after)")
  }

  enum Tokens {
    static let token = MainOnceToken("foreign loop")
  }

  /// Polls the driver's descriptor for ever, draining whenever it is readable.
  private func pollLoop() -> Never {
    var events = [pollfd(fd: MainQueueDriver.fileDescriptor, events: Int16(POLLIN), revents: 0)]
    while true {
      if Glibc.poll(&events, 1, -1) < 0 && errno != EINTR { fatalError("poll: \(errno)") }
      if events[0].revents & Int16(POLLIN) != 0 { MainQueueDriver.drain() }
    }
  }
}

/// A stack that demands to be built on the main thread, and records whether it was.
final class MainThreadCheck: Sendable {
  let builtOnMainThread: Bool

  @MainActor
  init() {
    MainContext.requireMainThread(for: "the fixture's stack")
    builtOnMainThread = Thread.isMainThread
  }
}

/// The few GLib functions a main loop needs, found with `dlopen`: no build-time dependency.
struct GLib {
  private typealias MainLoopNew = @convention(c) (OpaquePointer?, Int32) -> OpaquePointer?
  private typealias MainLoopRun = @convention(c) (OpaquePointer?) -> Void
  typealias FDSourceFunc = @convention(c) (Int32, UInt32, UnsafeMutableRawPointer?) -> Int32
  private typealias UnixFDAdd =
    @convention(c) (Int32, UInt32, FDSourceFunc, UnsafeMutableRawPointer?) -> UInt32

  private typealias SourceNew =
    @convention(c) (UnsafeMutablePointer<UnsafeRawPointer?>, UInt32) -> OpaquePointer?
  private typealias SourceAddUnixFD =
    @convention(c) (OpaquePointer?, Int32, UInt32) -> UnsafeMutableRawPointer?
  typealias SourceQueryUnixFD =
    @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> UInt32
  private typealias SourceAttach = @convention(c) (OpaquePointer?, OpaquePointer?) -> UInt32

  private let mainLoopNew: MainLoopNew
  private let mainLoopRun: MainLoopRun
  private let unixFDAdd: UnixFDAdd
  private let sourceNew: SourceNew
  private let sourceAddUnixFD: SourceAddUnixFD
  private let sourceQueryUnixFD: SourceQueryUnixFD
  private let sourceAttach: SourceAttach

  /// GLib, or `nil` if it cannot be loaded here (`dlerror()` says why).
  static func load() -> GLib? {
    guard let library = dlopen("libglib-2.0.so.0", RTLD_NOW | RTLD_LOCAL),
      let new = dlsym(library, "g_main_loop_new"), let run = dlsym(library, "g_main_loop_run"),
      let add = dlsym(library, "g_unix_fd_add"), let sourceNew = dlsym(library, "g_source_new"),
      let addFD = dlsym(library, "g_source_add_unix_fd"),
      let queryFD = dlsym(library, "g_source_query_unix_fd"),
      let attach = dlsym(library, "g_source_attach")
    else { return nil }
    return GLib(
      mainLoopNew: unsafeBitCast(new, to: MainLoopNew.self),
      mainLoopRun: unsafeBitCast(run, to: MainLoopRun.self),
      unixFDAdd: unsafeBitCast(add, to: UnixFDAdd.self),
      sourceNew: unsafeBitCast(sourceNew, to: SourceNew.self),
      sourceAddUnixFD: unsafeBitCast(addFD, to: SourceAddUnixFD.self),
      sourceQueryUnixFD: unsafeBitCast(queryFD, to: SourceQueryUnixFD.self),
      sourceAttach: unsafeBitCast(attach, to: SourceAttach.self))
  }

  /// Runs a GLib main loop on this thread for ever, served by one source, as the article's
  /// recipe is: `prepare` sets the loop's timeout to `MainQueueDriver.timeoutMilliseconds`
  /// (and runs nothing), `check` says whether the descriptor is readable or a timer is due, and
  /// `dispatch` drains, which runs the main queue's work and then a pass of `RunLoop.main`.
  /// Each wait and drain is recorded in `LoopRecord.shared`.
  func runServingRunLoop() -> Never {
    typealias Prepare = @convention(c) (OpaquePointer?, UnsafeMutablePointer<Int32>?) -> Int32
    typealias Check = @convention(c) (OpaquePointer?) -> Int32
    typealias Dispatch =
      @convention(c) (OpaquePointer?, OpaquePointer?, UnsafeMutableRawPointer?) -> Int32
    let prepare: Prepare = { _, timeout in
      let milliseconds = LoopRecord.shared.waits(MainQueueDriver.timeoutMilliseconds)
      timeout?.pointee = milliseconds
      return milliseconds == 0 ? 1 : 0  // TRUE: ready without polling
    }
    let check: Check = { source in
      let readable = MainQueueSource.query(source, MainQueueSource.tag) & 1 != 0  // G_IO_IN
      return readable || MainQueueDriver.timeoutMilliseconds == 0 ? 1 : 0
    }
    let dispatch: Dispatch = { _, _, _ in
      LoopRecord.shared.drains()
      MainQueueDriver.drain()
      return 1  // G_SOURCE_CONTINUE
    }
    // GSourceFuncs: prepare, check, dispatch, finalize, and two pointers GLib keeps for itself.
    let functions = UnsafeMutablePointer<UnsafeRawPointer?>.allocate(capacity: 6)
    functions.initialize(repeating: nil, count: 6)
    functions[0] = unsafeBitCast(prepare, to: UnsafeRawPointer.self)
    functions[1] = unsafeBitCast(check, to: UnsafeRawPointer.self)
    functions[2] = unsafeBitCast(dispatch, to: UnsafeRawPointer.self)
    // More than sizeof(GSource), which is 96 bytes on 64-bit Linux.
    let source = sourceNew(functions, 256)
    MainQueueSource.query = sourceQueryUnixFD
    MainQueueSource.tag = sourceAddUnixFD(source, MainQueueDriver.fileDescriptor, 1)  // G_IO_IN
    _ = sourceAttach(source, nil)
    mainLoopRun(mainLoopNew(nil, 0))
    fatalError("the GLib main loop returned")
  }

  /// Runs a GLib main loop on this thread for ever, draining the main queue when the driver's
  /// descriptor is readable.
  func run() -> Never {
    let loop = mainLoopNew(nil, 0)
    let glibInput: UInt32 = 1  // G_IO_IN
    _ = unixFDAdd(
      MainQueueDriver.fileDescriptor, glibInput,
      { _, _, _ in
        MainQueueDriver.drain()
        return 1  // G_SOURCE_CONTINUE
      }, nil)
    mainLoopRun(loop)
    fatalError("the GLib main loop returned")
  }
}

/// What the source's `check` needs, which a C function pointer cannot capture.
private enum MainQueueSource {
  // nonisolated(unsafe): written on the main thread before its loop runs, and read only by the
  // source's functions, which GLib calls on that thread.
  nonisolated(unsafe) static var query: GLib.SourceQueryUnixFD = { _, _ in 0 }
  nonisolated(unsafe) static var tag: UnsafeMutableRawPointer?
}
