// A deliberately racy program: CI runs it under ThreadSanitizer and requires a data-race report,
// which proves that TSan is live in the step that runs the tests under it. It is never part of
// `swift test`.
//
// The race is the bug MainOnce exists to prevent: a once-flag published and read with relaxed
// ordering, so nothing orders the initializer's write before the reader's read. MainOnce
// publishes with a releasing store and reads with an acquiring load; this does neither.
import Foundation
import Synchronization

/// The "initialized" state. This is deliberately not safe: the relaxed flag below does not
/// order its write before its read, and ThreadSanitizer must say so.
nonisolated(unsafe) var payload = 0

let isInitialized = Atomic(false)

Thread {
  payload = 42
  isInitialized.store(true, ordering: .relaxed)  // should be .releasing
}.start()

while !isInitialized.load(ordering: .relaxed) {}  // should be .acquiring
print("payload: \(payload)")
