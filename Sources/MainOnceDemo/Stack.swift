import Foundation
import MainOnce
import Synchronization

/// Stands in for a main-thread-only object, such as a Core Data stack or a GUI toolkit: it
/// must be created in main context and is then read from anywhere.
final class DemoStack: Sendable {
  let builtInMainContext: Bool
  let builtOnMainThread: Bool

  @MainActor
  init() {
    builtInMainContext = MainContext.isCurrent
    builtOnMainThread = Thread.isMainThread
    DemoStack.builds.add(1, ordering: .relaxed)
    usleep(20_000)  // A real stack takes a while: racing callers pile up behind it.
  }

  static let builds = Atomic(0)

  func fetchCount() -> Int { 42 }
}

enum Services {
  /// The lazily built stack. Its builder runs once, in main context.
  static let stack = MainLazy { DemoStack() }

  /// Logging must be configured once, on the main queue, before anything logs.
  static let loggingToken = MainOnceToken("logging")
  static let loggingConfigurations = Atomic(0)
}
