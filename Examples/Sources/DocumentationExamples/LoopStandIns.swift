// Stand-ins for GLib, SDL and libuv, with the shapes their C APIs take when imported into
// Swift, so that the recipes compile here as written without those libraries.

// GLib
typealias GIOCondition = UInt32
let G_IO_IN: GIOCondition = 1
let G_SOURCE_CONTINUE: Int32 = 1
typealias GUnixFDSourceFunc =
  @convention(c) (Int32, GIOCondition, UnsafeMutableRawPointer?) ->
  Int32
@discardableResult
func g_unix_fd_add(
  _ fd: Int32, _ condition: GIOCondition, _ function: GUnixFDSourceFunc,
  _ userData: UnsafeMutableRawPointer?
) -> UInt32 { 0 }

// SDL
struct SDL_Event {}
func SDL_PollEvent(_ event: UnsafeMutablePointer<SDL_Event>) -> Int32 { 0 }
func handle(_ event: SDL_Event) -> Bool { true }
func drawFrame() {}

// libuv (C structs, here as opaque words)
typealias uv_loop_t = Int
typealias uv_poll_t = Int
struct uv_poll_event: Equatable {
  var rawValue: UInt32
}
let UV_READABLE = uv_poll_event(rawValue: 1)
typealias uv_poll_cb = @convention(c) (UnsafeMutablePointer<uv_poll_t>?, Int32, Int32) -> Void
func uv_poll_init(
  _ loop: UnsafeMutablePointer<uv_loop_t>, _ handle: UnsafeMutablePointer<uv_poll_t>, _ fd: Int32
) -> Int32 { 0 }
func uv_poll_start(
  _ handle: UnsafeMutablePointer<uv_poll_t>, _ events: Int32, _ callback: uv_poll_cb
) -> Int32 { 0 }

// Logging
func log(_ message: String) {}
