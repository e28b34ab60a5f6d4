// The README's examples.
import Dispatch
import MainOnce

#if canImport(Glibc)
  import Glibc
#endif

// MARK: The forms side by side

func startAudio() {  // synchronous code, any thread
  // Blocking. Deadlocks if the main queue waits for this thread (MainOnce reports it).
  onceOnMain(token: Audio.setupToken) { configureAudio() }

  // Callback: returns at once; the handler runs on the main queue (or a queue you pass).
  onceOnMain(token: Audio.setupToken) {
    configureAudio()
  } completion: {
    startPlayback()
  }

  // Done already? One acquiring load.
  assert(Audio.setupToken.isDone)
}

func startAudio() async throws {  // async code: the same call suspends instead
  // Never blocks; a cancelled waiter throws CancellationError.
  try await onceOnMain(token: Audio.setupToken) { configureAudio() }
}

enum Services {
  static let stack = MainLazy { PersistenceStack() }  // Services.stack.value
  // A builder that throws: try Services.database.value
  static let database = MainLazy { try Database(path: databasePath) }
  // An async, throwing builder: try await Services.session.value
  static let session = AsyncMainLazy { try await Session.restore() }
}

@MainActor
final class DocumentWindow {
  func didBecomeVisible() {
    onceOnMain(for: self) { self.installToolbar() }  // once per window, on the main queue
    runOnce(for: self) { self.warmCaches() }  // once per window, on the calling thread
  }
}

// MARK: Swift 6 concurrency

@MainActor
func saveDocument() {
  let stack = Services.stack.value  // PersistenceStack is not Sendable: read on the main actor
  stack.save()
}

final class Player {  // not Sendable
  let mixer = Mixer()  // Sendable

  func prepare() {  // any thread
    onceOnMain(for: self) { [mixer] in mixer.play(Sound()) }  // capture what is Sendable
  }
}

// MARK: Your own event loop

func runEventLoop() {  // on the main thread, instead of dispatchMain()
  var events = [pollfd(fd: MainQueueDriver.fileDescriptor, events: Int16(POLLIN), revents: 0)]
  while true {
    _ = poll(&events, 1, -1)
    if events[0].revents & Int16(POLLIN) != 0 { MainQueueDriver.drain() }
  }
}

// MARK: Main-thread-only libraries

enum Toolkit {
  static let setupToken = MainOnceToken("toolkit")
}

func showFirstWindow() {
  onceOnMain(token: Toolkit.setupToken) {
    // After dispatchMain(), this stops with a message instead of calling the toolkit.
    MainContext.requireMainThread(for: "the toolkit")
    initializeToolkit()
  }
}
