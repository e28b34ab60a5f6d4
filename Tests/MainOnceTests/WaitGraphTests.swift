import Dispatch
import Foundation
import MainOnceFixtureSupport
import Synchronization
import Testing

@testable import MainOnce

/// The cycle search and the evidence rule on a graph of the test's own, with threads that
/// sleep in their waits, sleep elsewhere, spin, or serve.
@Suite("The wait-for graph and its evidence")
struct WaitGraphTests {
  @Test("a wait for a once-cell whose caller has been resolved is no edge, though still recorded")
  func resolvedCellWait() async {
    let outcome = await onThread { () -> (before: Bool, after: Bool) in
      let me = ThreadRecord.current.id
      let other = ThreadID(rawValue: Int32.max)
      // `other` waits for a cell whose initializer this thread runs; this thread waits for
      // `other`.
      let (theirs, ending) = RecordedWait.forCell(on: other, runBy: me)
      let mine = RecordedWait.forThread(other, on: me, evidence: .sleepsInWait)
      let state = DetectorState()
      state.waits = [other: theirs, me: mine]
      let before = state.cycle(closedBy: mine) != nil
      // The initializer returned: `other` is resolved, and has yet to take its wait off.
      ending.end()
      return (before, state.cycle(closedBy: mine) == nil)
    }
    #expect(outcome?.before == true)
    #expect(outcome?.after == true)
  }

  @Test("what threads wait for now leaves out waits that are over, down to the one they are in")
  func activeWaitsSkipEndedWaits() {
    let nesting = ThreadID(rawValue: Int32.max)
    let done = ThreadID(rawValue: Int32.max - 1)
    let (outer, _) = RecordedWait.forCell(on: nesting, runBy: done)
    let (inner, innerEnding) = RecordedWait.forCell(on: nesting, runBy: done)
    inner.previous = outer
    let (over, overEnding) = RecordedWait.forCell(on: done, runBy: nesting)
    innerEnding.end()
    overEnding.end()
    let state = DetectorState()
    state.waits = [nesting: inner, done: over]
    #expect(state.activeWaits.map(ObjectIdentifier.init) == [ObjectIdentifier(outer)])
  }

  @Test(
    "on the thread that closes a cycle, its own wait counts if it blocks on entry, not a withTrackedWait"
  )
  func closingWait() async {
    let outcome = await onThread { () -> [String] in
      let me = ThreadRecord.current.id
      let other = ThreadID(rawValue: Int32.max)
      return [RecordedWait.Evidence.sleepsInWait, .opaque].map { evidence in
        let (theirs, _) = RecordedWait.forCell(on: other, runBy: me)
        let mine = RecordedWait.forThread(other, on: me, evidence: evidence)
        return "\(evidence): \(verdict(closedBy: mine, waits: [other: theirs, me: mine]))"
      }
    }
    #expect(outcome == ["sleepsInWait: proven", "opaque: unsettled"])
  }

  @Test(
    "another thread's semaphore wait proves a cycle only while the thread sleeps in futex in it")
  func semaphoreWaitOfAnotherThread() async {
    let outcome = await onThread { () -> [String] in
      var verdicts: [String] = []
      for behaviour in [OtherThread.Behaviour.sleepsInFutex, .sleepsInNanosleep, .spins] {
        let other = OtherThread(behaviour)
        defer { other.release() }
        let me = ThreadRecord.current.id
        // `other` waits for this thread; this thread waits for a cell whose initializer
        // `other` runs.
        let theirs = RecordedWait.forThread(me, on: other.id, evidence: .sleepsInWait)
        let (mine, _) = RecordedWait.forCell(on: me, runBy: other.id)
        let waits: ThreadTable = [other.id: theirs, me: mine]
        verdicts.append("\(behaviour): \(verdict(closedBy: mine, waits: waits))")
        // Released: the wait is over, though `other` has not taken it off the graph.
        theirs.ended.store(true, ordering: .releasing)
        verdicts.append("\(behaviour), ended: \(verdict(closedBy: mine, waits: waits))")
      }
      return verdicts
    }
    #expect(
      outcome == [
        "sleepsInFutex: proven", "sleepsInFutex, ended: gone",
        "sleepsInNanosleep: unsettled", "sleepsInNanosleep, ended: gone",
        "spins: unsettled", "spins, ended: gone",
      ])
  }

  @Test(
    "a thread asleep outside its blocking call (in a lock on its way in, or serving) is not waiting"
  )
  func outsideTheBlockingCall() async {
    let outcome = await onThread { () -> [String] in
      let other = OtherThread(.sleepsInFutex)
      defer { other.release() }
      let me = ThreadRecord.current.id
      let theirs = RecordedWait.forThread(me, on: other.id, evidence: .sleepsInWait)
      let (mine, _) = RecordedWait.forCell(on: me, runBy: other.id)
      let waits: ThreadTable = [other.id: theirs, me: mine]
      // Out of its blocking call: it serves an initializer, say, or takes a lock.
      theirs.blocking.add(1, ordering: .releasing)
      let outside = verdict(closedBy: mine, waits: waits)
      theirs.blocking.add(1, ordering: .releasing)
      return ["outside: \(outside)", "inside: \(verdict(closedBy: mine, waits: waits))"]
    }
    #expect(outcome == ["outside: unsettled", "inside: proven"])
  }

  @Test("a withTrackedWait counts only once its thread has not run at all for a stall timeout")
  func opaqueWait() async {
    let outcome = await onThread { () -> [String] in
      var verdicts: [String] = []
      for behaviour in [OtherThread.Behaviour.sleepsInFutex, .spins] {
        let other = OtherThread(behaviour)
        defer { other.release() }
        let me = ThreadRecord.current.id
        let theirs = RecordedWait.forThread(me, on: other.id, evidence: .opaque)
        let (mine, _) = RecordedWait.forCell(on: me, runBy: other.id)
        let waits: ThreadTable = [other.id: theirs, me: mine]
        var baselines: [ThreadID: (progress: ThreadProgress, at: UInt64)] = [:]
        let first = verdict(closedBy: mine, waits: waits, baselines: &baselines)
        let soon = verdict(closedBy: mine, waits: waits, baselines: &baselines)
        // As if the first reading had been taken a stall timeout ago.
        if let baseline = baselines[other.id] { baselines[other.id] = (baseline.progress, 0) }
        let later = verdict(closedBy: mine, waits: waits, baselines: &baselines)
        verdicts.append("\(behaviour): \(first), \(soon), \(later)")
      }
      return verdicts
    }
    #expect(
      outcome == [
        "sleepsInFutex: unsettled, unsettled, proven", "spins: unsettled, unsettled, unsettled",
      ])
  }
}

extension WaitGraphTests {
  @Test("the thread table agrees with a dictionary through inserts, replacements and removals")
  func threadTable() {
    final class Box {}
    var table = ThreadTable<Box>()
    var model: [ThreadID: Box] = [:]
    var generator = SystemRandomNumberGenerator()
    for step in 0..<20_000 {
      // Ids that collide in a small table, and a few far apart.
      let id = ThreadID(
        rawValue: Int32.random(in: 1...200, using: &generator) * Int32(step % 7 + 1))
      if Bool.random(using: &generator) {
        let box = Box()
        #expect(table.updateValue(box, forKey: id) === model.updateValue(box, forKey: id))
      } else {
        #expect(table.updateValue(nil, forKey: id) === model.removeValue(forKey: id))
      }
    }
    #expect(table.keys.count == model.count)
    for (id, box) in model { #expect(table[id] === box) }
    for (id, box) in table { #expect(model[id] === box) }
  }
}

extension WaitGraphTests {
  @Test("a cycle whose wait was replaced while its evidence was gathered is gone, not proven")
  func replacedWait() async {
    let outcome = await onThread { () -> String in
      let other = OtherThread(.sleepsInFutex)
      defer { other.release() }
      let me = ThreadRecord.current.id
      let theirs = RecordedWait.forThread(me, on: other.id, evidence: .sleepsInWait)
      let (mine, _) = RecordedWait.forCell(on: me, runBy: other.id)
      let state = DetectorState()
      state.waits = [other.id: theirs, me: mine]
      guard let cycle = state.cycle(closedBy: mine) else { return "no cycle" }
      // Meanwhile the other thread began another wait, which the cycle does not name.
      state.waits[other.id] = RecordedWait.forThread(me, on: other.id, evidence: .sleepsInWait)
      return settled(cycle, closedBy: mine, graph: state)
    }
    #expect(outcome == "gone")
  }

  @Test("a cycle through a cell whose runner changed while its evidence was gathered is unsettled")
  func runnerChangedDuringTheEvidence() async {
    let outcome = await onThread { () -> String in
      let other = OtherThread(.sleepsInFutex)
      defer { other.release() }
      let me = ThreadRecord.current.id
      let theirs = RecordedWait.forThread(me, on: other.id, evidence: .sleepsInWait)
      // The cell's epoch moves on every time it is read: its runner keeps changing.
      let mine = RecordedWait(
        on: me, object: .subject(Cell(runBy: other.id, epochMoves: true), Ending()),
        operation: "onceOnMain(token:)", site: graphSite, holdsMainQueue: false,
        evidence: .resolution)
      let state = DetectorState()
      state.waits = [other.id: theirs, me: mine]
      guard let cycle = state.cycle(closedBy: mine) else { return "no cycle" }
      return settled(cycle, closedBy: mine, graph: state)
    }
    #expect(outcome == "unsettled")
  }
}

/// The verdict on `cycle`, asked on the closing thread, with `graph` as the detector's state.
private func settled(_ cycle: [CycleEdge], closedBy mine: RecordedWait, graph: DetectorState)
  -> String
{
  var baselines: [ThreadID: (progress: ThreadProgress, at: UInt64)] = [:]
  switch Evidence.settle(
    cycle, closedBy: mine, onClosingThread: true, baselines: &baselines, graph: Locked(graph))
  {
  case .proven: return "proven"
  case .unsettled: return "unsettled"
  case .gone: return "gone"
  }
}

extension WaitGraphTests {
  @Test("a thread's entry is still found after an entry earlier on its probe path is removed")
  func removalKeepsLaterEntries() {
    final class Box {}
    var lost: [(Int32, Int32)] = []
    // Among 64 ids some share a first slot in a table of 16, so that the second probes past the
    // first.
    for first in Int32(1)...64 {
      for second in Int32(1)...64 where second != first {
        var table = ThreadTable<Box>()
        let box = Box()
        table[ThreadID(rawValue: first)] = Box()
        table[ThreadID(rawValue: second)] = box
        table[ThreadID(rawValue: first)] = nil
        if table[ThreadID(rawValue: second)] !== box { lost.append((first, second)) }
      }
    }
    #expect(lost.isEmpty, "lost after removing the first of \(lost.prefix(4))")
  }
}

private let graphSite = CallSite(file: #fileID, line: #line)

/// The verdict on the cycle `mine` closes in a graph of `waits`, asked on the closing thread.
private func verdict(
  closedBy mine: RecordedWait, waits: ThreadTable<RecordedWait>,
  baselines: inout [ThreadID: (progress: ThreadProgress, at: UInt64)]
) -> String {
  let state = DetectorState()
  state.waits = waits
  guard let cycle = state.cycle(closedBy: mine) else { return "gone" }
  switch Evidence.settle(
    cycle, closedBy: mine, onClosingThread: true, baselines: &baselines, graph: Locked(state))
  {
  case .proven: return "proven"
  case .unsettled: return "unsettled"
  case .gone: return "gone"
  }
}

private func verdict(closedBy mine: RecordedWait, waits: ThreadTable<RecordedWait>) -> String {
  var baselines: [ThreadID: (progress: ThreadProgress, at: UInt64)] = [:]
  return verdict(closedBy: mine, waits: waits, baselines: &baselines)
}

/// A once-cell whose initializer runs on a given thread.
private final class Cell: WaitSubject {
  let label = CellLabel.token(
    name: StaticText("graph"), declaration: DeclarationSite(file: #fileID, line: #line))
  let runner: ThreadID
  let isWatchedForStalls = false
  /// Whether the epoch moves on at every read, as if the runner kept changing.
  private let epochMoves: Bool
  private let reads = Atomic<UInt>(0)

  init(runBy runner: ThreadID, epochMoves: Bool = false) {
    self.runner = runner
    self.epochMoves = epochMoves
  }

  var epochNow: UInt { epochMoves ? reads.add(1, ordering: .relaxed).newValue : 0 }

  func obstacle() -> Obstacle { .runner(runner, since: 0) }
  func stallSnapshot() -> StallSnapshot? { nil }
}

/// The end of a caller's wait for a ``Cell``.
private final class Ending: WaitEnding {
  private let ended = Atomic(false)
  var hasEnded: Bool { ended.load(ordering: .acquiring) }
  var site: CallSite { graphSite }
  func end() { ended.store(true, ordering: .releasing) }
}

extension RecordedWait {
  /// `thread`'s wait for a cell whose initializer `runner` runs.
  fileprivate static func forCell(on thread: ThreadID, runBy runner: ThreadID) -> (
    RecordedWait, Ending
  ) {
    let ending = Ending()
    let wait = RecordedWait(
      on: thread, object: .subject(Cell(runBy: runner), ending), operation: "onceOnMain(token:)",
      site: graphSite, holdsMainQueue: false, evidence: .resolution)
    return (wait, ending)
  }

  /// `thread`'s tracked wait for `target`, inside its blocking call.
  fileprivate static func forThread(
    _ target: ThreadID, on thread: ThreadID, evidence: Evidence
  ) -> RecordedWait {
    let wait = RecordedWait(
      on: thread, object: .target(WaitTarget(kind: .thread(target))), operation: "test",
      site: graphSite, holdsMainQueue: false, evidence: evidence)
    wait.blocking.add(1, ordering: .releasing)
    return wait
  }
}

/// A thread the graph can name: asleep in a semaphore wait, asleep in `usleep`, or spinning,
/// until released.
private final class OtherThread: Sendable {
  enum Behaviour: CustomStringConvertible {
    case sleepsInFutex, sleepsInNanosleep, spins

    var description: String {
      switch self {
      case .sleepsInFutex: "sleepsInFutex"
      case .sleepsInNanosleep: "sleepsInNanosleep"
      case .spins: "spins"
      }
    }
  }

  private let recorded = DispatchSemaphore(value: 0)
  private let released = DispatchSemaphore(value: 0)
  private let isReleased = Atomic(false)
  private let tid = Atomic<Int32>(0)

  init(_ behaviour: Behaviour) {
    Thread { [self] in
      tid.store(ThreadRecord.current.id.rawValue, ordering: .releasing)
      recorded.signal()
      switch behaviour {
      case .sleepsInFutex: _ = released.wait(timeout: .now() + TimeScale.seconds(30))
      case .sleepsInNanosleep: while !isReleased.load(ordering: .relaxed) { usleep(100_000) }
      case .spins: while !isReleased.load(ordering: .relaxed) {}
      }
    }.start()
    recorded.wait()
    // Until the kernel says it sleeps, a sleeping thread is on its way into its sleep.
    if behaviour != .spins { _ = waitUntil { ThreadSampler.reading(of: id).isAsleep } }
  }

  var id: ThreadID { ThreadID(rawValue: tid.load(ordering: .acquiring)) }

  func release() {
    isReleased.store(true, ordering: .relaxed)
    released.signal()
  }
}
