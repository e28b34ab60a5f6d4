// Runs one of the SDL recipes of SDLRecipe.swift as a game would, under SDL's dummy video driver
// (no display needed), and checks what the recipe promises:
//
// - a worker thread's onceOnMain is served by the game loop: its initializer runs once, on the
//   main thread;
// - a Timer on RunLoop.main fires under the loop: a main-queue block schedules it;
// - a quit that another event follows in the same frame ends the loop: the timer pushes
//   SDL_QUIT and then another event, so both are queued before the loop looks again;
// - `wait` only: the watcher wakes the loop once per drain, not for as long as the descriptor is
//   readable, even while the main thread is busy for half a second with main-queue work pending.
//
//   swift run --package-path Examples/EventLoops SDLRecipe poll|wait
//
// It prints PASS and exits 0, or prints what went wrong and exits 1; it gives up after a minute
// (times MAINONCE_TEST_TIME_SCALE, as the tests' bounds, if that is set).
import CSDL2
import CThreadID
import Dispatch
import Foundation
import MainOnce
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

enum Check {
  static let setupToken = MainOnceToken("SDL setup")
  /// `poll` runs `runGame()`, `wait` runs `runWaitingGame()` with the watcher thread.
  static let variant = CommandLine.arguments.dropFirst().first ?? "poll"
  /// The check's own user event types: the event that follows the quit, and one that keeps the
  /// main thread busy for half a second, as a slow frame of a game would.
  static let followerType = SDL_RegisterEvents(2)
  static var busyType: UInt32 { followerType + 1 }
  /// Signalled when the main thread has started being busy.
  static let busyStarted = DispatchSemaphore(value: 0)
  /// The events `handle` got, frame by frame (`drawFrame` starts a new frame).
  static let frames = Mutex<[[UInt32]]>([[]])
  /// How many times the setup ran, and the thread it last ran on.
  static let setupRuns = Atomic(0)
  static let setupThread = Atomic(0)
  /// Whether the worker got past onceOnMain.
  static let workerServed = Atomic(false)
  /// How many wake events the watcher pushed (counted by an SDL event watch).
  static let wakes = Atomic(0)
  /// At most this many wakes in a run: one per drain, and the run has about two.
  static let wakeLimit = 4
  /// Counts the wake events as the watcher pushes them, on its thread: an SDL event watch.
  static let countWakes: SDL_EventFilter = { _, event in
    if event?.pointee.type == MainQueueWake.eventType { wakes.add(1, ordering: .relaxed) }
    return 0
  }

  /// When the check gives up: a bound against a hang only, generous on a busy machine.
  static let giveUpSeconds =
    60 * (getenv("MAINONCE_TEST_TIME_SCALE").flatMap { Double(String(cString: $0)) } ?? 1)

  static func fail(_ message: String) -> Never {
    let line = "SDL recipe (\(variant)): FAIL: \(message)\n"
    _ = line.withCString { write(2, $0, strlen($0)) }
    exit(1)
  }
}

// The game's own code, which the recipes call.

/// Records the event; a quit ends the game, and the busy event keeps the main thread for 500 ms.
func handle(_ event: SDL_Event) -> Bool {
  Check.frames.withLock { $0[$0.count - 1].append(event.type) }
  if event.type == Check.busyType {
    Check.busyStarted.signal()
    usleep(500_000)
  }
  return event.type != SDL_QUIT.rawValue
}

/// Ends the frame; a real game would draw here, and wait for the display.
func drawFrame() {
  Check.frames.withLock { $0.append([]) }
  SDL_Delay(1)
}

func push(_ type: UInt32) {
  var event = SDL_Event()
  event.type = type
  if SDL_PushEvent(&event) != 1 {
    Check.fail("SDL_PushEvent(\(type)) failed: \(String(cString: SDL_GetError()))")
  }
}

/// A worker thread that needs the main thread's setup, then ends the game.
func startWorker() {
  DispatchQueue.global().async {
    onceOnMain(token: Check.setupToken) {
      MainContext.requireMainThread(for: "SDL")
      Check.setupRuns.add(1, ordering: .relaxed)
      Check.setupThread.store(Int(example_thread_id()), ordering: .relaxed)
    }
    Check.workerServed.store(true, ordering: .relaxed)
    print("worker: onceOnMain returned")
    if Check.variant == "wait" {
      // Main-queue work arrives while the main thread is busy: the descriptor stays readable.
      push(Check.busyType)
      Check.busyStarted.wait()
    }
    DispatchQueue.main.async {
      // The game ends from a timer on RunLoop.main, which the loop must fire: both events are
      // queued before it looks again, so the quit has a follower.
      _ = Timer.scheduledTimer(withTimeInterval: 0.1, repeats: false) { _ in
        push(SDL_QUIT.rawValue)
        push(Check.followerType)
      }
    }
  }
}

setenv("SDL_VIDEODRIVER", "dummy", 0)
guard Check.variant == "poll" || Check.variant == "wait" else {
  Check.fail("unknown variant '\(Check.variant)': give poll or wait")
}
guard SDL_Init(SDL_INIT_VIDEO) == 0 else {
  Check.fail("SDL_Init failed: \(String(cString: SDL_GetError()))")
}
print("SDL video driver: \(String(cString: SDL_GetCurrentVideoDriver()))")
DispatchQueue.global().asyncAfter(deadline: .now() + Check.giveUpSeconds) {
  Check.fail(
    "the game loop did not end within \(Check.giveUpSeconds) s: the quit was lost or never sent")
}
startWorker()
if Check.variant == "poll" {
  runGame()
} else {
  SDL_AddEventWatch(Check.countWakes, nil)
  startMainQueueWatcher()
  runWaitingGame()
}

// The loop ended. Check why, and what ran where.
let frames = Check.frames.withLock { $0 }
let quit = SDL_QUIT.rawValue
guard Check.workerServed.load(ordering: .relaxed), Check.setupRuns.load(ordering: .relaxed) == 1
else { Check.fail("the setup ran \(Check.setupRuns.load(ordering: .relaxed)) times, not once") }
guard Check.setupThread.load(ordering: .relaxed) == Int(getpid()) else {
  Check.fail(
    "the setup ran on thread \(Check.setupThread.load(ordering: .relaxed)), not the main thread")
}
if Check.variant == "poll" {
  // The quit and its follower came in one frame, the follower after the quit.
  guard let frame = frames.first(where: { $0.contains(quit) }),
    let quitIndex = frame.firstIndex(of: quit),
    frame[(quitIndex + 1)...].contains(Check.followerType)
  else {
    Check.fail("no frame had the quit followed by another event: \(frames.filter { !$0.isEmpty })")
  }
  print("the frame with the quit had events \(frame); the loop ended after \(frames.count) frames")
} else {
  // The quit ended the loop; its follower is still queued.
  var follower = SDL_Event()
  guard frames.joined().last == quit,
    SDL_PeepEvents(&follower, 1, SDL_PEEKEVENT, Check.followerType, Check.followerType) == 1
  else { Check.fail("the loop did not end at the quit, or the quit had no follower: \(frames)") }
  let wakes = Check.wakes.load(ordering: .relaxed)
  guard wakes <= Check.wakeLimit else {
    Check.fail(
      "the watcher pushed \(wakes) wake events: it must push one, then wait until the loop has"
        + " drained (at most \(Check.wakeLimit) expected)")
  }
  print("the loop ended at the quit, its follower still queued; \(wakes) wake events in all")
}
SDL_Quit()
print(
  "PASS: SDL recipe (\(Check.variant)): the setup ran once, on the main thread (thread"
    + " \(getpid())); a quit that another event followed ended the loop")
exit(0)
