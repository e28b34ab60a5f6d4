import Dispatch
import Foundation
import MainOnce
import MainOnceFixtureSupport
import Synchronization

/// A counter and a log that escaping closures and tasks can share.
final class Recorder<Entry: Sendable>: Sendable {
  private let entries = Mutex<[Entry]>([])

  func record(_ entry: Entry) { entries.withLock { $0.append(entry) } }
  var recorded: [Entry] { entries.withLock { $0 } }
  var count: Int { entries.withLock { $0.count } }
}
