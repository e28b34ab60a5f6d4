@testable import MainOnce

/// A log that escaping closures, threads and tasks can share.
///
/// It locks with MainOnce's `Locked` (a `pthread_mutex_t`), like every lock in these tests:
/// `Synchronization.Mutex` is a futex that ThreadSanitizer cannot see on Linux, so state it
/// guards would be reported as racing.
final class Recorder<Entry: Sendable>: Sendable {
  private let entries = Locked<[Entry]>([])

  func record(_ entry: Entry) { entries.withLock { $0.append(entry) } }
  var recorded: [Entry] { entries.withLock { $0 } }
  var count: Int { entries.withLock { $0.count } }
}
