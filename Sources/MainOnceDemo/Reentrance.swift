import Foundation
import MainOnce

/// An initializer that uses its own token: MainOnce stops with both call sites instead of
/// hanging.
enum Reentrance {
  static let token = MainOnceToken("settings")

  static func run() -> Never {
    say("MainOnce demo: an initializer that calls onceOnMain for its own token")
    onceOnMain(token: token) {
      loadSettings()
    }
    fatalError("unreachable: MainOnce stops the process above")
  }

  private static func loadSettings() {
    onceOnMain(token: token) {}
  }
}
