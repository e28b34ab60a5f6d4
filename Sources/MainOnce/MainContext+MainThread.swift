extension MainContext {
  /// Stops the process with a message unless the caller holds the main queue *on the main
  /// thread*.
  ///
  /// Call it first in an initializer that calls a library that needs the main thread itself,
  /// not only the main queue: GTK, SDL's video subsystem, many toolkits.
  ///
  /// ```swift
  /// onceOnMain(token: Toolkit.setupToken) {
  ///   // After dispatchMain(), this stops with a message instead of calling the toolkit.
  ///   MainContext.requireMainThread(for: "the toolkit")
  ///   initializeToolkit()
  /// }
  /// ```
  ///
  /// Under `RunLoop.main.run()`, with ``MainQueueDriver``, and in top-level code before any run
  /// loop starts, main-queue code runs on the main thread and this returns at once. After
  /// `dispatchMain()`, in an `async` `main` after its first suspension, and under `swift test`,
  /// main-queue code runs on worker threads: then this stops with a message that names the
  /// driver and the fix, instead of letting the library run on the wrong thread.
  ///
  /// It costs a thread-local lookup and a load: cheap enough to leave in release builds.
  ///
  /// - Parameters:
  ///   - library: What needs the main thread, for the message; for example `"GTK"`.
  ///   - file: The caller's file, for the message; leave the default.
  ///   - line: The caller's line, for the message; leave the default.
  public static func requireMainThread(
    for library: String = "this code", file: StaticString = #fileID, line: UInt = #line
  ) {
    let thread = ThreadRecord.current
    let inMainContext = isCurrent(on: thread)
    if inMainContext && thread.isMainThread { return }
    let site = CallSite(file: file, line: line)
    guard inMainContext else {
      Diagnostics.fail(
        "MainOnce: \(library) needs the main thread, and the code at \(site) runs on"
          + " \(thread.id) outside main context. Run it on the main queue, for example in"
          + " onceOnMain(token:), served from the main thread.",
        at: site)
    }
    Diagnostics.fail(
      "MainOnce: \(library) needs the main thread, but the main-queue code at \(site) runs on"
        + " \(thread.id), a worker thread: after dispatchMain() (and in an async main after its"
        + " first await, and under swift test) libdispatch serves the main queue from worker"
        + " threads. Serve it from the main thread instead: call RunLoop.main.run(), or drain it"
        + " from your event loop with MainQueueDriver.",
      at: site)
  }
}
