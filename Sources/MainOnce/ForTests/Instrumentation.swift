internal import Synchronization

// For tests only, in a room of its own: what MainOnce's own tests read of it, and one switch
// they set, and only for them: not API, and not in the library that packages depending on
// MainOnce build in release. Nothing in MainOnce calls this room. It calls `Engine/` (the
// engine's counters and the subjects it times, `EngineCounters` in `MainQueueEngine.swift`; the
// waits on the board) and `PerObject/` (its weak-load switch, `ObjectLifetimes.usesWeakLoads`),
// only to read and set what they keep for their tests.
//
// Where they exist: in debug builds (`DEBUG`, which SwiftPM defines), which is how `swift test`
// and the ThreadSanitizer run build the tests and the fixture processes, and in release builds
// for tests, which pass `-Xswiftc -DMAINONCE_INSTRUMENTATION` (with `-enable-testing`): the
// AddressSanitizer run and the static fixtures of the run-loop matrix (see `.ci/run`). Tests and
// fixtures reach them with `@testable import MainOnce`. Everywhere else the rooms below keep
// nothing for tests and make no call to count (the weak-load switch is the constant `false`),
// and this room is empty: a release build keeps no counter, and no symbol for one.
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
      EngineCounters.hops.load(ordering: .relaxed)
    }

    /// How many threads are parked now in a wait of MainOnce's own: blocking callers of
    /// `onceOnMain`, of a `MainLazy` or of `runOnce(for:)`. A thread counts from the moment its
    /// wait is recorded (any hop it needs is on its way, and the deadlock detector sees the
    /// wait) until it wakes. Tests that need a thread blocked in MainOnce before they go on wait
    /// for this count instead of sleeping.
    static var parkedThreads: Int {
      EngineCounters.parked.load(ordering: .acquiring)
    }

    /// Whether per-object cells made from now on tell their object's lifetime with a weak load,
    /// as where the side-table layout fails its self-test, instead of reading the side table.
    /// Cells made before keep their way. For a test that runs that fallback, which this
    /// toolchain never takes by itself, and for the benchmarks that time both ways side by side
    /// on MainOnce's own code path. It costs a relaxed load a cell made, off the fast path.
    static var objectCellsUseWeakLoads: Bool {
      get { ObjectLifetimes.usesWeakLoads }
      set { ObjectLifetimes.usesWeakLoads = newValue }
    }

    /// The subjects callers wait for now: every gate and `AsyncMainLazy` build that callers
    /// which do not block have waited for (registered, weakly, when the first such caller starts
    /// its subject's timer, in a test runner only), and those of blocked callers: a probe of the
    /// engine for tests that need to see queued callers.
    static var waitedFor: [any StallSubject] {
      let blocked = WaitBoard.read { published in
        published.compactMap { ($0.wait as? any BlockingWait)?.stallSubject }
      }
      let others = EngineCounters.subjects.withLock { $0.values.compactMap(\.subject) }
      var seen = Set<ObjectIdentifier>()
      return (blocked + others).filter { seen.insert(ObjectIdentifier($0)).inserted }
    }
  }
#endif
