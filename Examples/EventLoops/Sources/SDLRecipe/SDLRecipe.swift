// The SDL recipes of the DocC article "Serving the main queue from your own event loop",
// compiled against the real SDL 2 headers: a game loop that polls for events each frame, and one
// that sleeps in SDL_WaitEvent. `main.swift` runs both, with the game's own `handle` and
// `drawFrame`, and checks what they promise.
import CSDL2
import Dispatch
import MainOnce

#if canImport(Glibc)
  import Glibc
#endif

func runGame() {
  var running = true
  while running {
    var event = SDL_Event()
    while SDL_PollEvent(&event) != 0 {
      // Handle every event of the frame, but let no later event undo a quit.
      if !handle(event) { running = false }
    }
    MainQueueDriver.drain()  // main-queue work, once a frame
    drawFrame()
  }
}

/// The SDL event that asks a waiting loop to drain the main queue, and the loop's word back.
enum MainQueueWake {
  /// A user event type of its own, registered with SDL on first use.
  static let eventType = SDL_RegisterEvents(1)
  /// Signalled by the loop after each drain: the watcher may watch again.
  static let drained = DispatchSemaphore(value: 0)
}

func startMainQueueWatcher() {  // after SDL_Init, before the loop waits
  let watch: SDL_ThreadFunction = { _ in
    var readable = pollfd(fd: MainQueueDriver.fileDescriptor, events: Int16(POLLIN), revents: 0)
    while true {
      guard poll(&readable, 1, -1) > 0 else { continue }  // interrupted: watch again
      var wake = SDL_Event()
      wake.type = MainQueueWake.eventType
      while SDL_PushEvent(&wake) < 0 { SDL_Delay(1) }  // SDL's queue is full: try again
      // One wake at a time: the descriptor stays readable until the loop drains.
      MainQueueWake.drained.wait()
    }
  }
  SDL_DetachThread(SDL_CreateThread(watch, "main queue watcher", nil))
}

func runWaitingGame() {
  var running = true
  var event = SDL_Event()
  while running {
    // Wait no longer than until RunLoop.main's next timer is due (-1: for ever).
    let timeout = MainQueueDriver.timeoutMilliseconds
    if SDL_WaitEventTimeout(&event, timeout) == 0 {
      guard timeout >= 0 else { break }  // no timeout, so SDL failed
      MainQueueDriver.drain()  // a timer is due
      continue
    }
    if event.type == MainQueueWake.eventType {
      MainQueueDriver.drain()
      MainQueueWake.drained.signal()  // the watcher may wake the loop again
    } else {
      running = handle(event)
    }
  }
}
