// The examples in MainOnce's DocC articles.
import Dispatch
import MainOnce

// MARK: Serving the main queue from your own event loop

func serveMainQueueFromGLib() {  // on the main thread, before the GLib loop runs
  let drain: GUnixFDSourceFunc = { _, _, _ in
    MainQueueDriver.drain()
    return G_SOURCE_CONTINUE
  }
  _ = g_unix_fd_add(MainQueueDriver.fileDescriptor, G_IO_IN, drain, nil)
}

func runGame() {
  var running = true
  while running {
    var event = SDL_Event()
    while SDL_PollEvent(&event) != 0 { running = handle(event) }
    MainQueueDriver.drain()  // main-queue work, once a frame
    drawFrame()
  }
}

func serveMainQueueFromLibuv(_ loop: UnsafeMutablePointer<uv_loop_t>) {
  let handle = UnsafeMutablePointer<uv_poll_t>.allocate(capacity: 1)
  _ = uv_poll_init(loop, handle, MainQueueDriver.fileDescriptor)
  _ = uv_poll_start(handle, Int32(UV_READABLE.rawValue)) { _, _, _ in
    MainQueueDriver.drain()
  }
}

// MARK: Deadlocks: configuration

func routeReportsToTheLog() {
  DeadlockDetection.reportHandler = { report in
    log("\(report.text)")
  }
}
