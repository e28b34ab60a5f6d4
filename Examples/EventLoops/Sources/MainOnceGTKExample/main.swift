// A GTK 4 application on its own GLib main loop, with the main queue served by MainQueueDriver.
//
// Eight workers on Dispatch's worker threads need the application's window, which only the
// main thread may build with GTK. Each asks for it with onceOnMain: the first call queues the
// setup and hops to the main queue, which the GLib loop drains on the main thread; the others
// wait for that one setup.
// The window stays for `--seconds` (5 unless given); the application gives up if it has no
// window within a minute. Either way it quits by itself.
//
//   swift run --package-path Examples/EventLoops MainOnceGTKExample [--seconds N]
//
// It prints where the setup ran, and exits with 0 only if the setup ran once (on the main
// thread: requireMainThread stops the process anywhere else), every worker got the window, and
// the window stayed its time. CI runs it under Xvfb and takes a screenshot.
import CGTK4
import CThreadID
import Dispatch
import MainOnce
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

enum Interface {
  static let setupToken = MainOnceToken("GTK window")
  static let workerCount = 8
  /// How long the window stays on screen.
  static let seconds =
    CommandLine.arguments.firstIndex(of: "--seconds")
    .flatMap { CommandLine.arguments.dropFirst($0 + 1).first }.flatMap { UInt32($0) } ?? 5
  /// How many workers have returned from onceOnMain, with the window built.
  static let workersServed = Atomic(0)
  /// How many times the setup ran (once, if onceOnMain keeps its promise).
  @MainActor static var setupRuns = 0
  /// Whether the window stayed its time: the application ran until the timer after the setup.
  @MainActor static var windowStayed = false
}

func runApplication() -> Int32 {  // on the main thread
  let application = gtk_application_new("org.example.App", G_APPLICATION_DEFAULT_FLAGS)
  serveMainQueueFromGLib()
  let activate: @convention(c) (UnsafeMutablePointer<GtkApplication>?, gpointer?) -> Void = {
    application, _ in
    // The window is built after `activate` returns, when the main queue serves the workers'
    // setup: hold the application until then, or g_application_run returns first.
    g_application_hold(UnsafeMutablePointer(OpaquePointer(application)))
    startWorkers()
  }
  g_signal_connect_data(
    application, "activate", unsafeBitCast(activate, to: GCallback.self), nil, nil,
    GConnectFlags(0))
  return g_application_run(UnsafeMutablePointer(OpaquePointer(application)), 0, nil)
}

func serveMainQueueFromGLib() {  // on the main thread, before the GLib loop runs
  // The source's functions, kept for the life of the process, as the source is.
  let functions = UnsafeMutablePointer<GSourceFuncs>.allocate(capacity: 1)
  functions.initialize(
    to: GSourceFuncs(
      prepare: { _, timeout in
        // Wait no longer than until RunLoop.main's next timer is due; run nothing here.
        let milliseconds = MainQueueDriver.timeoutMilliseconds
        timeout?.pointee = milliseconds
        return gboolean(milliseconds == 0 ? 1 : 0)
      },
      check: { source in
        let readable = g_source_query_unix_fd(source, descriptorTag(of: source)).rawValue != 0
        return gboolean(readable || MainQueueDriver.timeoutMilliseconds == 0 ? 1 : 0)
      },
      dispatch: { _, _, _ in
        MainQueueDriver.drain()  // the main queue's work, then a pass of RunLoop.main
        // G_SOURCE_CONTINUE is a macro Swift cannot import; gboolean is an Int32, so 1 (TRUE).
        return gboolean(1)
      },
      finalize: nil, closure_callback: nil, closure_marshal: nil))
  // A GSource with room after it for the descriptor's tag, which `check` needs.
  let size = MemoryLayout<GSource>.size + MemoryLayout<gpointer?>.size
  let source = g_source_new(functions, guint(size))
  let tag = g_source_add_unix_fd(source, MainQueueDriver.fileDescriptor, G_IO_IN)
  UnsafeMutableRawPointer(source!).storeBytes(
    of: tag, toByteOffset: MemoryLayout<GSource>.size, as: gpointer?.self)
  g_source_attach(source, nil)
}

/// The tag `g_source_add_unix_fd` gave for the driver's descriptor, stored after the GSource.
func descriptorTag(of source: UnsafeMutablePointer<GSource>?) -> gpointer? {
  UnsafeMutableRawPointer(source!).load(
    fromByteOffset: MemoryLayout<GSource>.size, as: gpointer?.self)
}

/// Starts the workers that need the window; each gets it through the token.
func startWorkers() {
  for worker in 1...Interface.workerCount {
    DispatchQueue.global().async {
      onceOnMain(token: Interface.setupToken) {
        // GTK may be used on the main thread only: stop with a message anywhere else.
        MainContext.requireMainThread(for: "GTK")
        buildWindow()
      }
      Interface.workersServed.add(1, ordering: .relaxed)
      print("worker \(worker) on thread \(example_thread_id()): the window is built")
    }
  }
}

/// Builds the window and shows it: main-thread-only GTK calls.
@MainActor
func buildWindow() {
  Interface.setupRuns += 1
  print("setup: building the window on thread \(example_thread_id()) of process \(getpid())")
  let application = g_application_get_default()
  let window = gtk_application_window_new(UnsafeMutablePointer(OpaquePointer(application)))
  let asWindow = UnsafeMutablePointer<GtkWindow>(OpaquePointer(window))
  gtk_window_set_title(asWindow, "MainOnce GTK example")
  gtk_window_set_default_size(asWindow, 480, 320)
  // The window is filled with one colour, #3366CC, which CI looks for in a screenshot.
  let area = gtk_drawing_area_new()
  gtk_drawing_area_set_draw_func(
    UnsafeMutablePointer(OpaquePointer(area)),
    { _, cairo, _, _, _ in
      cairo_set_source_rgb(cairo, 0.2, 0.4, 0.8)
      cairo_paint(cairo)
      cairo_set_source_rgb(cairo, 1, 1, 1)
      cairo_set_font_size(cairo, 22)
      cairo_move_to(cairo, 24, 48)
      cairo_show_text(cairo, "Built once, on the main thread")
    }, nil, nil)
  gtk_window_set_child(asWindow, area)
  gtk_window_present(asWindow)
  print("setup: the window is presented; it stays for \(Interface.seconds) s")
  // The window keeps the application running now.
  g_application_release(application)
  g_timeout_add_seconds(Interface.seconds, quit, nil)
}

/// Quits the application once the window has stayed its time: a GLib timeout's callback.
let quit: GSourceFunc = { _ in
  MainActor.assumeIsolated { Interface.windowStayed = true }
  g_application_quit(g_application_get_default())
  return gboolean(0)  // G_SOURCE_REMOVE, a macro too
}

// Gives up if no window is built within a minute: the example never hangs.
g_timeout_add_seconds(
  60,
  { _ in
    if MainActor.assumeIsolated({ Interface.setupRuns == 0 }) {
      g_application_quit(g_application_get_default())
    }
    return gboolean(0)
  }, nil)

let status = runApplication()
let (runs, stayed) = MainActor.assumeIsolated { (Interface.setupRuns, Interface.windowStayed) }
let served = Interface.workersServed.load(ordering: .relaxed)
let passed = status == 0 && runs == 1 && stayed && served == Interface.workerCount
print(
  "\(passed ? "PASS" : "FAIL"): the setup ran \(runs) time(s); \(served) of"
    + " \(Interface.workerCount) workers got the window;"
    + " \(stayed ? "it stayed \(Interface.seconds) s" : "the application ended before it could")"
    + "; g_application_run returned \(status)")
exit(passed ? 0 : 1)
