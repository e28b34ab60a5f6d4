import Foundation
import MainOnceFixtureSupport
import Testing

/// Runs `body(index)` on `count` new threads released at the same moment, and waits at most
/// `timeout` for all of them. Returns `false` (and records an issue) if they did not finish.
@discardableResult
func raceThreads(
  _ count: Int,
  timeout: Duration = .seconds(60),
  sourceLocation: SourceLocation = #_sourceLocation,
  _ body: @escaping @Sendable (Int) -> Void
) -> Bool {
  let finished = DispatchGroup()
  let gate = StartGate(parties: count)
  for index in 0..<count {
    finished.enter()
    Thread {
      gate.arriveAndWait()
      body(index)
      finished.leave()
    }.start()
  }
  let seconds = Double(timeout.components.seconds)
  guard finished.wait(timeout: .now() + seconds) == .success else {
    Issue.record("threads did not finish within \(timeout)", sourceLocation: sourceLocation)
    return false
  }
  return true
}

/// Whether the long stress mode is on (`MAINONCE_STRESS=long`).
let isLongStress = ProcessInfo.processInfo.environment["MAINONCE_STRESS"] == "long"
