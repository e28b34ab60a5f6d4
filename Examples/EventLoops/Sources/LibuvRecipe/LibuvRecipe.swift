// The libuv recipe of the DocC article "Serving the main queue from your own event loop",
// compiled against the real libuv headers.
import CLibuv
import MainOnce

func serveMainQueueFromLibuv(_ loop: UnsafeMutablePointer<uv_loop_t>) {
  let handle = UnsafeMutablePointer<uv_poll_t>.allocate(capacity: 1)
  _ = uv_poll_init(loop, handle, MainQueueDriver.fileDescriptor)
  _ = uv_poll_start(handle, Int32(UV_READABLE.rawValue)) { _, _, _ in
    MainQueueDriver.drain()
  }
}
