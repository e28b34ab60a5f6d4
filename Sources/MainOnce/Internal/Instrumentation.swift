internal import Synchronization

/// Counters for MainOnce's benchmarks and tests. Not API: names and meanings may change without
/// notice, and no release promises them.
///
/// This is the one surface MainOnce keeps for its tests and benchmarks (`@_spi(Instrumentation)`;
/// tests reach everything else with `@testable import`, from test-only code in the test target).
/// What the shipped library pays for it: two relaxed atomic increments a hop or a parked thread,
/// off the fast path. The registry of waited-for subjects below is kept only in a test runner.
@_spi(Instrumentation)
public enum Instrumentation {
  /// How many hops MainOnce has sent to the main queue: each is one main-queue work item.
  public static var mainQueueWorkItems: Int {
    hops.load(ordering: .relaxed)
  }

  static let hops = Atomic(0)

  static func noteHop() {
    hops.add(1, ordering: .relaxed)
  }

  /// How many threads are parked now in a wait of MainOnce's own: blocking callers of
  /// `onceOnMain`, of a `MainLazy` or of `runOnce(for:)`. A thread counts from the moment its
  /// wait is recorded (any hop it needs is on its way, and the deadlock detector sees the wait)
  /// until it wakes. Tests that need a thread blocked in MainOnce before they go on wait for
  /// this count instead of sleeping.
  public static var parkedThreads: Int {
    parked.load(ordering: .acquiring)
  }

  static let parked = Atomic(0)

  static func noteParked() {
    parked.add(1, ordering: .releasing)
  }

  static func noteWoke() {
    parked.subtract(1, ordering: .relaxed)
  }
}

extension Instrumentation {
  /// Every flight and `AsyncMainLazy` build that callers which do not block have waited for,
  /// weakly: a probe of the engine for tests that need to see queued callers. Registered when
  /// the first such caller starts its subject's timer; under the lock. Only in a test runner
  /// (`Platform.isTestRunner`): any other process registers nothing.
  static let subjects = Locked<[ObjectIdentifier: WeakSubject]>([:])

  struct WeakSubject {
    weak var subject: (any StallSubject)?
  }

  static func noteSubject(_ subject: any StallSubject) {
    guard Platform.isTestRunner else { return }
    subjects.withLock { subjects in
      subjects = subjects.filter { $0.value.subject != nil }
      subjects[ObjectIdentifier(subject)] = WeakSubject(subject: subject)
    }
  }

  /// The subjects callers wait for now: those registered, and those of blocked callers.
  static var waitedFor: [any StallSubject] {
    let blocked = WaitBoard.read { published in
      published.compactMap { ($0.wait as? any BlockingWait)?.stallSubject }
    }
    let others = subjects.withLock { $0.values.compactMap(\.subject) }
    var seen = Set<ObjectIdentifier>()
    return (blocked + others).filter { seen.insert(ObjectIdentifier($0)).inserted }
  }
}
