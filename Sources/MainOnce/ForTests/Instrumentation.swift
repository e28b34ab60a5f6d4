internal import Synchronization

// For tests only, in a room of its own: counters for MainOnce's own tests, and one switch, and
// only for them: not API, and not in the library that packages depending on MainOnce build in
// release.
//
// Where they exist: in debug builds (`DEBUG`, which SwiftPM defines), which is how `swift test`
// and the ThreadSanitizer run build the tests and the fixture processes, and in release builds
// for tests, which pass `-Xswiftc -DMAINONCE_INSTRUMENTATION` (with `-enable-testing`): the
// AddressSanitizer run and the static fixtures of the run-loop matrix (see `.ci/run`). Tests and
// fixtures reach them with `@testable import MainOnce`. Everywhere else the engine's calls below
// are empty and inlined away: a release build keeps no counter, and no symbol for one.
//
// Why not a package trait, or SPI: a trait the tests need would have to be a default trait, which
// every dependent package gets, or else a flag on the README's `swift test`; SPI is public
// surface in every build. The benchmarks, which build MainOnce in release as a dependent does,
// count the main-queue work items themselves: they wrap `dispatch_async_f`, the one call that
// sends a hop (Benchmarks/CBenchmarkSupport/MainQueueWorkItems.c). Only the weak-load rows of
// their `objects` group need the switch below, and so a build for tests (Benchmarks/README.md).
#if DEBUG || MAINONCE_INSTRUMENTATION
  enum Instrumentation {
    /// How many hops MainOnce has sent to the main queue: each is one main-queue work item.
    static var mainQueueWorkItems: Int {
      hops.load(ordering: .relaxed)
    }

    static let hops = Atomic(0)

    static func noteHop() {
      hops.add(1, ordering: .relaxed)
    }

    /// How many threads are parked now in a wait of MainOnce's own: blocking callers of
    /// `onceOnMain`, of a `MainLazy` or of `runOnce(for:)`. A thread counts from the moment its
    /// wait is recorded (any hop it needs is on its way, and the deadlock detector sees the
    /// wait) until it wakes. Tests that need a thread blocked in MainOnce before they go on wait
    /// for this count instead of sleeping.
    static var parkedThreads: Int {
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
    /// Whether per-object cells made from now on tell their object's lifetime with a weak load,
    /// as where the side-table layout fails its self-test, instead of reading the side table.
    /// Cells made before keep their way. For a test that runs that fallback, which this
    /// toolchain never takes by itself, and for the benchmarks that time both ways side by side
    /// on MainOnce's own code path. It costs a relaxed load a cell made, off the fast path.
    static var objectCellsUseWeakLoads: Bool {
      get { weakLoadCells.load(ordering: .relaxed) }
      set { weakLoadCells.store(newValue, ordering: .relaxed) }
    }

    static let weakLoadCells = Atomic(false)
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
#else
  /// The engine's calls, with nothing to count in a build that is not for tests.
  enum Instrumentation {
    @inline(__always) static func noteHop() {}
    @inline(__always) static func noteParked() {}
    @inline(__always) static func noteWoke() {}
    @inline(__always) static func noteSubject(_ subject: any StallSubject) {}
    /// Cells read the side table wherever the layout allows: a constant, so that `ObjectCell.init`
    /// compiles as if there were no switch.
    @inline(__always) static var objectCellsUseWeakLoads: Bool { false }
  }
#endif
