import Dispatch
import Foundation
import Synchronization
import Testing

@testable import MainOnce

/// The cycle check on a registry of its own, with edges as a thread leaves them between being
/// released from a wait and taking it off the graph.
@Suite("The wait-for graph")
struct WaitGraphTests {
  @Test("a flight wait whose caller has been resolved is no edge, though it is still recorded")
  func resolvedFlightWait() async {
    let outcome = await onThread { () -> (before: Bool, after: Bool) in
      let me = ThreadRecord.current.id
      // `other` waits for an initializer that this thread runs; this thread waits for `other`.
      var (registry, other, waiter) = Registry.withFlightWait(runBy: me)
      let mine = BlockedWait(
        object: .target(WaitTarget(kind: .thread(other))), operation: "test", site: site,
        holdsMainQueue: false)
      let before = registry.beginWait(mine, on: me, response: .abort).cycle
      // The initializer returned: `other` is released, and has yet to take the lock.
      Deliveries().resolving(waiter, .done)
      let after = registry.cycle(closedBy: mine, on: me, .abort)
      return (before.isReport, after == nil)
    }
    #expect(outcome?.before == true)
    #expect(outcome?.after == true)
  }

  @Test(
    "the wait that closes a cycle counts as blocked only if it blocks on entry, unlike withTrackedWait"
  )
  func closingWaitThatComputesFirst() async {
    let outcome = await onThread { () -> [String] in
      let me = ThreadRecord.current.id
      // `other` waits for an initializer that this thread runs; this thread, running, is about
      // to wait for `other`.
      let (registry, other, _) = Registry.withFlightWait(runBy: me)
      return [true, false].map { blocksOnEntry in
        let mine = BlockedWait(
          object: .target(WaitTarget(kind: .thread(other))), operation: "test", site: site,
          holdsMainQueue: false, blocksOnEntry: blocksOnEntry)
        return "\(blocksOnEntry): \(registry.cycle(closedBy: mine, on: me, .abort).verdict)"
      }
    }
    #expect(outcome == ["true: report", "false: unsure"])
  }

  @Test("another thread's tracked wait proves a cycle only while the thread sleeps in it")
  func trackedWaitOfAnotherThread() async {
    let outcome = await onThread { () -> [String] in
      var verdicts: [String] = []
      for behaviour in [OtherThread.Behaviour.sleeps, .spins] {
        let other = OtherThread(behaviour)
        defer { other.release() }
        let me = ThreadRecord.current.id
        // `other` waits for this thread; this thread waits for an initializer `other` runs.
        var registry = Registry()
        let theirs = BlockedWait(
          object: .target(WaitTarget(kind: .thread(me))), operation: "test", site: site,
          holdsMainQueue: false)
        registry.waits[other.id] = theirs
        let flight = Flight(label: .token(name: "graph", declaration: site), policy: .mainQueue)
        flight.runner = Runner(thread: other.id, site: site)
        let waiter = Waiter(site: site, thread: me, attempt: nil, delivery: .inPlace)
        flight.queue = [waiter]
        let mine = BlockedWait(
          object: .flight(flight, waiter), operation: "onceOnMain(token:)", site: site,
          holdsMainQueue: false)
        _ = registry.beginWait(mine, on: me, response: .abort)
        verdicts.append("\(behaviour): \(registry.cycle(closedBy: mine, on: me, .abort).verdict)")
        // Released: the wait is over, though `other` has not taken it off the graph.
        theirs.end?.mark()
        verdicts.append(
          "\(behaviour), ended: \(registry.cycle(closedBy: mine, on: me, .abort).verdict)")
      }
      return verdicts
    }
    #expect(
      outcome == [
        "sleeps: report", "sleeps, ended: none", "spins: unsure", "spins, ended: none",
      ])
  }
}

private let site = CallSite(file: #fileID, line: #line)

extension Registry {
  /// A registry in which a thread of no process, `other`, is blocked for an initializer that
  /// `runner` runs, as `waiter`.
  fileprivate static func withFlightWait(runBy runner: ThreadID) -> (
    Registry, other: ThreadID, waiter: Waiter
  ) {
    let other = ThreadID(rawValue: Int32.max)
    let flight = Flight(label: .token(name: "graph", declaration: site), policy: .callingThread)
    flight.runner = Runner(thread: runner, site: site)
    let waiter = Waiter(site: site, thread: other, attempt: nil, delivery: .inPlace)
    flight.queue = [waiter]
    var registry = Registry()
    registry.waits[other] = BlockedWait(
      object: .flight(flight, waiter), operation: "onceOnMain(token:)", site: site,
      holdsMainQueue: false)
    return (registry, other, waiter)
  }
}

extension Deliveries {
  /// Resolves `waiter` as a finishing flight does, without waking anything.
  fileprivate func resolving(_ waiter: Waiter, _ resolution: Resolution) {
    var deliveries = self
    deliveries.resolve(waiter, resolution)
  }
}

extension Optional where Wrapped == Cycle {
  fileprivate var isReport: Bool {
    if case .report = self { true } else { false }
  }

  fileprivate var verdict: String {
    switch self {
    case .report: "report"
    case .serviced: "serviced"
    case .unsure: "unsure"
    case nil: "none"
    }
  }
}

/// A thread the graph can name, asleep in a semaphore wait or spinning, until released.
private final class OtherThread: Sendable {
  enum Behaviour: CustomStringConvertible {
    case sleeps, spins

    var description: String { self == .sleeps ? "sleeps" : "spins" }
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
      case .sleeps: _ = released.wait(timeout: .now() + 30)
      case .spins: while !isReleased.load(ordering: .relaxed) {}
      }
    }.start()
    recorded.wait()
    // Until the kernel says it sleeps, a sleeping thread is on its way into its wait.
    let deadline = ContinuousClock.now + .seconds(10)
    while behaviour == .sleeps && ThreadSampler.isAsleep(id) != true
      && ContinuousClock.now < deadline
    {
      usleep(1_000)
    }
  }

  var id: ThreadID { ThreadID(rawValue: tid.load(ordering: .acquiring)) }

  func release() {
    isReleased.store(true, ordering: .relaxed)
    released.signal()
  }
}
