import Testing

@testable import MainOnce

/// The rule for a deadlock in the wait-for graph: a thread is stuck when every thread that could
/// end its wait is stuck too.
@Suite("The wait-for graph")
struct WaitGraphTests {
  private func node(
    _ thread: Int32, waitsForAnyOf blockers: [Int32], proof: WaitProof = .structural
  )
    -> WaitGraph.Node
  {
    WaitGraph.Node(
      thread: ThreadID(rawValue: thread), identity: ObjectIdentifier(WaitGraphTests.self),
      publication: 1, blockers: blockers.map { ThreadID(rawValue: $0) }, reason: "",
      epoch: 0, slices: (0, 0), proof: proof, holdsMainQueue: false,
      waitsForMainQueueInitializer: false, call: "wait",
      waitsFor: "work")
  }

  @Test("two threads that wait for each other are deadlocked, each edge listed once")
  func twoThreadCycle() {
    let graph = WaitGraph(nodes: [node(1, waitsForAnyOf: [2]), node(2, waitsForAnyOf: [1])])
    let edges = graph.deadlock(through: ThreadID(rawValue: 1))
    #expect(edges?.map(\.thread.rawValue) == [1, 2])
  }

  @Test("a wait for work ends when any performer finishes it: one free performer breaks it")
  func workIsAnOrWait() {
    // Thread 1 waits for work that threads 2 and 3 perform; 2 waits for 1, 3 is free.
    let free = WaitGraph(nodes: [node(1, waitsForAnyOf: [2, 3]), node(2, waitsForAnyOf: [1])])
    #expect(free.deadlock(through: ThreadID(rawValue: 1)) == nil)
    // Once 3 waits for 1 too, nobody can end 1's wait.
    let stuck = WaitGraph(nodes: [
      node(1, waitsForAnyOf: [2, 3]), node(2, waitsForAnyOf: [1]), node(3, waitsForAnyOf: [1]),
    ])
    #expect(stuck.deadlock(through: ThreadID(rawValue: 1))?.count == 3)
  }

  @Test("a thread that waits into a deadlock it is not part of is stuck, and so is the chain")
  func chainIntoACycle() {
    let graph = WaitGraph(nodes: [
      node(1, waitsForAnyOf: [2]), node(2, waitsForAnyOf: [3]), node(3, waitsForAnyOf: [2]),
    ])
    #expect(
      graph.deadlock(through: ThreadID(rawValue: 1))?.map(\.thread.rawValue) == [1, 2, 3])
    #expect(graph.deadlock(through: ThreadID(rawValue: 4)) == nil)
  }

  @Test("a deadlock through a wait MainOnce cannot see into can be reported, never proven")
  func opaqueWaitsAreNotProof() throws {
    let graph = WaitGraph(nodes: [
      node(1, waitsForAnyOf: [2]), node(2, waitsForAnyOf: [1], proof: .opaque),
    ])
    let edges = try #require(graph.deadlock(through: ThreadID(rawValue: 1)))
    #expect(!CandidateDeadlock(edges: edges).canBeProven)
  }

  /// A wait for work, or for a thread captured in dispatch work: a thread MainOnce cannot name
  /// may still end it, so the deadlock is reported, with the reason, and never proven.
  @Test(
    "a deadlock through a wait whose target is not a closed set is reported with why, never proven")
  func openTargetsAreNotProof() throws {
    let why = "a thread that does not perform it now may still end"
    let graph = WaitGraph(nodes: [
      node(1, waitsForAnyOf: [2]), node(2, waitsForAnyOf: [1], proof: .open(because: why)),
    ])
    let edges = try #require(graph.deadlock(through: ThreadID(rawValue: 1)))
    #expect(!CandidateDeadlock(edges: edges).canBeProven)
    let report = DeadlockReport.cycle(edges, proven: false, response: .abort)
    #expect(!report.stopsProcess)
    #expect(
      report.text.hasPrefix(
        "MainOnce: possible deadlock, not stopped: wait waits for work, which \(why)\n"),
      "\(report.text)")
  }

  @Test("a sliced wait is proven only by a slice that began after the deadlock was first seen")
  func slicesMustComeAfter() throws {
    func sliced(_ started: UInt, _ timedOut: UInt) -> WaitGraph.Node {
      WaitGraph.Node(
        thread: ThreadID(rawValue: 2), identity: ObjectIdentifier(WaitGraphTests.self),
        publication: 1, blockers: [ThreadID(rawValue: 1)], reason: "", epoch: 0,
        slices: (started, timedOut), proof: .slices, holdsMainQueue: false,
        waitsForMainQueueInitializer: false, call: "wait",
        waitsFor: "thread 1")
    }
    let first = try #require(
      WaitGraph(nodes: [node(1, waitsForAnyOf: [2]), sliced(4, 3)])
        .deadlock(through: ThreadID(rawValue: 1)))
    let candidate = CandidateDeadlock(edges: first)
    // The slice under way when the deadlock was seen (4) timed out: not enough.
    let same = try #require(
      WaitGraph(nodes: [node(1, waitsForAnyOf: [2]), sliced(5, 4)])
        .deadlock(through: ThreadID(rawValue: 1)))
    #expect(!candidate.isProven(by: same))
    let later = try #require(
      WaitGraph(nodes: [node(1, waitsForAnyOf: [2]), sliced(6, 5)])
        .deadlock(through: ThreadID(rawValue: 1)))
    #expect(candidate.isProven(by: later))
  }
}
