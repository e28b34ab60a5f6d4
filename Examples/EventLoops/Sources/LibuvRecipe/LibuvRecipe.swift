// The libuv recipe of the DocC article "Serving the main queue from your own event loop",
// compiled against the real libuv headers. `main.swift` runs it and checks what it promises.
import CLibuv
import MainOnce

/// Serves the main queue from `loop` until the function it returns is called, on the loop's
/// thread; the loop can then end by itself, and be closed.
func serveMainQueueFromLibuv(_ loop: UnsafeMutablePointer<uv_loop_t>) -> () -> Void {
  let handle = UnsafeMutablePointer<uv_poll_t>.allocate(capacity: 1)
  _ = uv_poll_init(loop, handle, MainQueueDriver.fileDescriptor)
  _ = uv_poll_start(handle, Int32(UV_READABLE.rawValue)) { _, _, _ in
    MainQueueDriver.drain()
  }
  return {  // stop serving: uv_close stops the poll, and the loop frees the handle
    uv_close(UnsafeMutablePointer(OpaquePointer(handle))) {
      UnsafeMutableRawPointer($0)?.deallocate()
    }
  }
}
