import MainOnceFixtureSupport
import Testing

@testable import MainOnce

/// Waits until `condition` holds, looking every millisecond on a thread of its own (never on the
/// cooperative pool), for at most `timeout` (scaled, see ``TimeScale``); returns whether it did.
///
/// For a test that needs other callers to have reached a point (queued behind an initializer,
/// joined a build) before it goes on: a sleep only makes that likely, and under load it is not.
func eventually(
  timeout: Duration = .seconds(10), sourceLocation: SourceLocation = #_sourceLocation,
  _ condition: @escaping @Sendable () -> Bool
) async -> Bool {
  let held =
    await onThread(timeout: timeout + .seconds(5), sourceLocation: sourceLocation) {
      waitUntil(timeout: timeout, condition)
    } ?? false
  if !held { Issue.record("not so after \(timeout.scaled)", sourceLocation: sourceLocation) }
  return held
}

/// How many callers (threads, tasks, completion handlers) wait for the once-cell or
/// `AsyncMainLazy` build whose label (as reports print it) `matches`: the callers its stall
/// report would list, counted by the cell under its own lock.
func callersWaiting(where matches: (String) -> Bool) -> Int {
  let subjects = Instrumentation.waitedFor
  return subjects.filter { matches("\($0.label)") }
    .compactMap { $0.stallSnapshot()?.callers.count }.reduce(0, +)
}
