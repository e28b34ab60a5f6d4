// The examples in MainOnce's doc comments.
import Dispatch
import MainOnce

// MARK: MainOnceToken

enum AudioEngine {
  static let setupToken = MainOnceToken("audio setup")
}

// MARK: onceOnMain(token:)

enum Fonts {
  static let setupToken = MainOnceToken("fonts")
}

func drawText() {  // any thread
  onceOnMain(token: Fonts.setupToken) {
    loadSystemFonts()
  }
  // The fonts are loaded here, whichever thread got here first.
}

// MARK: await onceOnMain(token:)

func loadView() async throws {
  try await onceOnMain(token: Fonts.setupToken) {
    loadSystemFonts()
  }
}

// MARK: onceOnMain(token:completion:)

func startRendering() {
  onceOnMain(token: Fonts.setupToken) {
    loadSystemFonts()
  } completion: {
    renderFirstFrame()  // on the main queue, after the initializer
  }
}

// MARK: onceOnMain(for:) and runOnce(for:)

@MainActor
final class SettingsPanel {
  func didAppear() {
    onceOnMain(for: self) { self.buildControls() }  // once per panel
  }

  func buildControls() {}
}

final class Thumbnailer: Sendable {
  func thumbnail(for path: String) {  // any thread
    runOnce(for: self) { self.loadModel() }  // once per thumbnailer, here, on this thread
  }

  func loadModel() {}
}

// MARK: MainLazy

enum Stores {
  static let render = MainLazy { RenderStack() }
  static let database = MainLazy { try Database(path: databasePath) }
}

func draw() throws {  // any thread
  render(Stores.render.value)  // built on first use, in main context
  let database = try Stores.database.value  // a builder that throws
  database.record("frame drawn")
}

// Reading a MainLazy in async code.

@MainActor
func saveOnQuit() async {
  Services.stack.value.save()  // not Sendable: read on the main actor, never blocks
  render(await Stores.render.get())  // Sendable: no suspension on the main actor
}

nonisolated func prefetch() async {
  render(await Stores.render.get())  // suspends, never blocks, until it is built
}

func drawLater() async throws {  // any task
  let database = try await Stores.database.get()
  database.record("frame drawn")
}

// Waiting without initializing.

func startAudio() {  // the producer, any thread
  onceOnMain(token: AudioEngine.setupToken) { configureAudio() }
}

func mixInBackground() {  // a consumer, another thread
  AudioEngine.setupToken.wait()  // returns once startAudio()'s initializer has run
  log("audio is set up")
}

func mixWhenReady() async throws {  // any task
  try await AudioEngine.setupToken.wait()
  log("audio is set up")
}

func mixLater() {
  AudioEngine.setupToken.wait {
    log("audio is set up")  // on the main queue, once an initializer has run
  }
}

func recordWhenOpen() {  // any thread; never opens the database itself
  let database = Stores.database.wait()  // returns once a read has built it
  database.record("opened")
}

// MARK: DeadlockDetection

func configureTestSuite() {
  DeadlockDetection.stalls = .report(after: .milliseconds(250))  // a test suite wants it sooner
}

// MARK: AsyncMainLazy

enum Sessions {
  static let current = AsyncMainLazy { try await Session.restore() }
}

func resume() async throws {  // any task
  let session = try await Sessions.current.get()
  session.start()
}

func resumeWhenRestored() async throws {  // any task; never restores the session itself
  let session = try await Sessions.current.wait()
  session.start()
}

// MARK: withTrackedWait(for:) and WaitTarget

func rebuildIndex() {
  let indexer = WaitTarget.work("indexer")
  let finished = DispatchSemaphore(value: 0)
  DispatchQueue.global().async {
    indexer.perform { buildIndex() }
    finished.signal()
  }
  withTrackedWait(for: indexer) { finished.wait() }  // as finished.wait(for: indexer) does
}

enum Pictures {
  static let stack = MainLazy { RenderStack() }
}

func deadlockOnPurpose() {
  DispatchQueue.main.async {
    let loader = DispatchQueue(label: "loader")
    let done = DispatchSemaphore(value: 0)
    loader.async {
      render(Pictures.stack.value)  // needs the main queue
      done.signal()
    }
    done.wait(for: .queue(loader))  // on the main queue: a deadlock, stopped within 100 ms
  }
}
