// The examples in MainOnce's DocC articles. The README's one example is in
// ReadmeFirstExample.swift.
import Dispatch
import MainOnce

#if canImport(Glibc)
  import Glibc
#endif

// The GLib, GTK, SDL and libuv recipes are in the EventLoops package, compiled against the
// real libraries; the poll loop and the main-thread check are below.

// MARK: Deadlocks: configuration

func configureForCI() {
  DeadlockDetection.cycles = .abort  // the default
  DeadlockDetection.stalls = .abort(after: .seconds(2))  // opt in to stop on a stuck main queue
}

func routeReportsToTheLog() {
  DeadlockDetection.reportHandler = { report in
    log("\(report.text)")
  }
}

// MARK: Using MainOnce in the Swift 6 language mode: a token is not copied

func prepare(forPlayback playback: Bool) {
  if playback {
    onceOnMain(token: Audio.setupToken) { configureAudio() }
  } else {
    onceOnMain(token: Fonts.setupToken) { loadSystemFonts() }
  }
}

// MARK: Lazy values the articles read

enum Services {
  static let stack = MainLazy { PersistenceStack() }  // Services.stack.value
  // A builder that throws: try Services.database.value
  static let database = MainLazy { try Database(path: databasePath) }
  // An async, throwing builder: try await Services.session.value
  static let session = AsyncMainLazy { try await Session.restore() }
}

// MARK: Choosing an API: once per object

@MainActor
final class DocumentWindow {
  func didBecomeVisible() {
    onceOnMain(for: self) { self.installToolbar() }  // once per window, on the main queue
    runOnce(for: self) { self.warmCaches() }  // once per window, on the calling thread
  }
}

// MARK: Using MainOnce in the Swift 6 language mode

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

// MARK: Serving the main queue from your own event loop

func runEventLoop() {  // on the main thread, instead of dispatchMain()
  var events = [pollfd(fd: MainQueueDriver.fileDescriptor, events: Int16(POLLIN), revents: 0)]
  while true {
    _ = poll(&events, 1, MainQueueDriver.timeoutMilliseconds)
    MainQueueDriver.drain()
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

// MARK: Choosing an API: where tokens and lazy values live

struct SoundBoard: ~Copyable {
  let setup = MainOnceToken("player")
  let mixer = MainLazy<Mixer, Never> { Mixer() }
}
