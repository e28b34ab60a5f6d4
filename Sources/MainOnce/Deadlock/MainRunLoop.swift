/// Whether `RunLoop.main` is running, asked of CoreFoundation without importing Foundation.
///
/// The watchdog needs this to tell a main thread that has never served the main queue from one
/// whose run loop is serving it and is stuck inside a main-queue block: both hold the main queue
/// and can be blocked in `futex`. A running run loop has a current mode.
///
/// MainOnce does not link Foundation. It looks up CoreFoundation's C functions in the loaded
/// images, so the answer is "no" in a process that never loaded Foundation, where no `RunLoop`
/// can be running.
enum MainRunLoop {
  private typealias GetMain = @convention(c) () -> UnsafeMutableRawPointer?
  private typealias CopyCurrentMode =
    @convention(c) (UnsafeMutableRawPointer?) ->
    UnsafeMutableRawPointer?
  private typealias Release = @convention(c) (UnsafeMutableRawPointer?) -> Void

  /// Whether the main thread's run loop is running in some mode right now. Thread-safe:
  /// `CFRunLoopCopyCurrentMode` takes the run loop's own lock. Only the watchdog asks.
  static var isRunning: Bool {
    guard let getMain = function("CFRunLoopGetMain", as: GetMain.self),
      let copyCurrentMode = function("CFRunLoopCopyCurrentMode", as: CopyCurrentMode.self),
      let release = function("CFRelease", as: Release.self),
      let mode = copyCurrentMode(getMain())
    else { return false }
    release(mode)
    return true
  }

  private static func function<Function>(_ name: String, as type: Function.Type) -> Function? {
    Platform.symbol(named: name).map { unsafeBitCast($0, to: type) }
  }
}
