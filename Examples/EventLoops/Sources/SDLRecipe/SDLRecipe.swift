// The SDL recipe of the DocC article "Serving the main queue from your own event loop",
// compiled against the real SDL 2 headers.
import CSDL2
import MainOnce

func runGame() {
  var running = true
  while running {
    var event = SDL_Event()
    while SDL_PollEvent(&event) != 0 { running = handle(event) }
    MainQueueDriver.drain()  // main-queue work, once a frame
    drawFrame()
  }
}

// The game's own code, which the recipe calls.
func handle(_ event: SDL_Event) -> Bool { event.type != SDL_QUIT.rawValue }
func drawFrame() {}
