// The examples in MainOnce's DocC articles.
import Dispatch
import MainOnce

// The GLib, GTK, SDL and libuv recipes are in the EventLoops package, compiled against the
// real libraries; the poll loop and the main-thread check are among the README's examples.

// MARK: Deadlocks: configuration

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
