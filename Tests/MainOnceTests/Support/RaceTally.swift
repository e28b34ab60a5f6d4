import Dispatch
import Foundation
import MainOnce
import MainOnceFixtureSupport
import Synchronization

/// Counts what initializers and their callers saw.
final class RaceTally: Sendable {
  let runs = Atomic(0)
  let earlyReturns = Atomic(0)
  let finished = Atomic(false)
  let ranInMainContext = Atomic(true)

  @MainActor
  func initialize() {
    if !MainContext.isCurrent || DispatchQueue.getSpecific(key: mainQueueKey) != true {
      ranInMainContext.store(false, ordering: .relaxed)
    }
    runs.add(1, ordering: .relaxed)
    usleep(5_000)
    finished.store(true, ordering: .releasing)
  }

  func returned() {
    if !finished.load(ordering: .acquiring) { earlyReturns.add(1, ordering: .relaxed) }
  }
}

/// A counter and a log that escaping closures and tasks can share.
final class Recorder<Entry: Sendable>: Sendable {
  private let entries = Mutex<[Entry]>([])

  func record(_ entry: Entry) { entries.withLock { $0.append(entry) } }
  var recorded: [Entry] { entries.withLock { $0 } }
  var count: Int { entries.withLock { $0.count } }
}
