// The libuv recipe of the DocC article "Serving the main queue from your own event loop",
// compiled against the real libuv headers. `main.swift` runs it and checks what it promises.
import CLibuv
import MainOnce

/// Serves the main queue from `loop` until the function it returns is called, on the loop's
/// thread; the loop can then end by itself, and be closed.
func serveMainQueueFromLibuv(_ loop: UnsafeMutablePointer<uv_loop_t>) -> () -> Void {
  let poll = UnsafeMutablePointer<uv_poll_t>.allocate(capacity: 1)
  _ = uv_poll_init(loop, poll, MainQueueDriver.fileDescriptor)
  _ = uv_poll_start(poll, Int32(UV_READABLE.rawValue)) { _, _, _ in
    MainQueueDriver.drain()
  }
  // Before each wait (libuv computes its timeout after the prepare handles run), a timer for
  // when RunLoop.main's next timer is due.
  let timer = UnsafeMutablePointer<uv_timer_t>.allocate(capacity: 1)
  _ = uv_timer_init(loop, timer)
  let prepare = UnsafeMutablePointer<uv_prepare_t>.allocate(capacity: 1)
  _ = uv_prepare_init(loop, prepare)
  prepare.pointee.data = UnsafeMutableRawPointer(timer)
  _ = uv_prepare_start(prepare) { prepare in
    let timer = prepare!.pointee.data.assumingMemoryBound(to: uv_timer_t.self)
    let timeout = MainQueueDriver.timeoutMilliseconds
    if timeout < 0 {
      _ = uv_timer_stop(timer)
    } else {
      _ = uv_timer_start(timer, { _ in MainQueueDriver.drain() }, UInt64(timeout), 0)
    }
  }
  return {  // stop serving: uv_close stops each handle, and the loop frees it
    for handle in [OpaquePointer(poll), OpaquePointer(timer), OpaquePointer(prepare)] {
      uv_close(UnsafeMutablePointer(handle)) { UnsafeMutableRawPointer($0)?.deallocate() }
    }
  }
}
