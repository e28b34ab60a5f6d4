// Stand-ins for the app code the examples call: declared here so that the examples compile
// as they are written in the documentation.
import Dispatch
import MainOnce

struct Sound: Sendable {}

/// A mixer that is safe to use from any thread.
final class Mixer: Sendable {
  func play(_ sound: Sound) {}
}

/// A stack that holds main-actor state: built and used on the main actor only.
final class PersistenceStack {
  func save() {}
}

struct Database: Sendable {
  init(path: String) throws {}
  func record(_ event: String) {}
}

let databasePath = "/var/lib/app/app.db"

struct Session: Sendable {
  static func restore() async throws -> Session { Session() }
  func start() {}
}

struct RenderStack: Sendable {}

@MainActor func configureMainThreadOnlyAudioLibrary() {}
@MainActor func configureAudio() {}
@MainActor func initializeToolkit() {}
@MainActor func loadSystemFonts() {}
func buildIndex() {}
func renderFirstFrame() {}
func render(_ stack: RenderStack) {}
func log(_ message: String) {}

extension DocumentWindow {
  func installToolbar() {}
  func warmCaches() {}
}
