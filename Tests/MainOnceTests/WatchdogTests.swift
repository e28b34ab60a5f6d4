import Testing

@testable import MainOnce

/// The watchdog's bookkeeping on a detector state of the test's own: which looks are due, and
/// what they say, given the callers a subject reports.
@Suite("The watchdog's bookkeeping")
struct WatchdogTests {
  @Test("a caller that arrives after the watchdog read the clock never makes a wait negative")
  func callerArrivingAfterTheClock() {
    let state = DetectorState()
    let subject = StalledCell()
    // Looked at before, so due again now; its only caller arrived after the clock was read.
    state.watched[ObjectIdentifier(subject)] = StallWatch(subject: subject, nextLook: 0)
    let arrival = Platform.monotonicNanoseconds() + 3_600_000_000_000
    let snapshot = StallSnapshot(
      callers: [.init(kind: .thread, thread: nil, site: watchdogSite, since: arrival)],
      obstacle: subject.obstacle())
    let due = state.dueWork(
      [(subject, snapshot)],
      settings: .init(stallResponse: .report, stallTimeoutNanoseconds: 1_000_000_000))
    #expect(due.looks.count == 1)
    guard let look = due.looks.first else { return }
    #expect(look.since <= look.now)
    let report = look.report(
      Finding(holder: nil, activity: .unknown, progress: nil), isStuck: false, stops: false)
    #expect(report.text.contains("has waited 0 ms in "), "\(report.text)")
  }
}

private let watchdogSite = CallSite(file: #fileID, line: #line)

/// A once-cell whose initializer runs on a thread that does not exist, for ever.
private final class StalledCell: WaitSubject {
  let label = CellLabel.token(
    name: StaticText("stalled"), declaration: DeclarationSite(file: #fileID, line: #line))
  let isWatchedForStalls = true
  let epochNow: UInt = 0

  func obstacle() -> Obstacle { .runner(ThreadID(rawValue: Int32.max), since: 0) }
  func stallSnapshot() -> StallSnapshot? { nil }
}
