import CBenchmarkSupport
import MainOnce

/// A fast path measured in the main queue's context and from another thread.
struct Candidate: Sendable {
  let name: String
  /// Whether this is MainOnce's own (for allocation counts).
  let isMainOnce: Bool
  let onMainQueue: (@MainActor @Sendable (Int) async -> Int)?
  let onOtherThread: Loop?

  enum Loop: Sendable {
    /// Runs on a plain thread.
    case blocking(@Sendable (Int) -> Int)
    /// Runs in a task on the global executor.
    case suspending(@Sendable (Int) async -> Int)
  }

  static let baselineName = "dispatch_once_f (C, inline fast path)"

  static let all: [Candidate] = [
    blocking("empty probe (a call and a return)", mainOnce: false) {
      repeatProbe($0) { bench_empty_probe() }
    },
    blocking(baselineName, mainOnce: false) {
      repeatProbe($0) { bench_dispatch_once_probe() }
    },
    blocking("onceOnMain(token:)", mainOnce: true) { repeatProbe($0, FastPaths.onceOnMainProbe) },
    blocking("MainLazy.value", mainOnce: true) { repeatProbe($0, FastPaths.mainLazyProbe) },
    suspending("empty async probe", mainOnce: false) {
      await repeatProbe($0, FastPaths.emptyAsyncProbe)
    },
    suspending("await onceOnMain(token:)", mainOnce: true) {
      await repeatProbe($0, FastPaths.asyncOnceOnMainProbe)
    },
    suspending("await AsyncMainLazy.get()", mainOnce: true) {
      await repeatProbe($0, FastPaths.asyncLazyProbe)
    },
    blocking("onceOnMain(for:) (per object)", mainOnce: true) {
      repeatProbe($0, FastPaths.perObjectProbe)
    },
    blocking("static let (class instance)", mainOnce: false) {
      repeatProbe($0, FastPaths.staticLetProbe)
    },
    Candidate(
      name: "@MainActor static let (from main)", isMainOnce: false,
      onMainQueue: { repeatProbe($0, FastPaths.mainActorStaticLetProbe) }, onOtherThread: nil),
    blocking("pthread_once", mainOnce: false) { repeatProbe($0) { bench_pthread_once_probe() } },
    blocking("Mutex-guarded flag", mainOnce: false) { repeatProbe($0, FastPaths.mutexProbe) },
    blocking("Khan port (Thread.isMainThread first)", mainOnce: false) {
      repeatProbe($0, FastPaths.khanPortProbe)
    },
    blocking("MainContext.isCurrent", mainOnce: true) {
      repeatProbe($0, FastPaths.mainContextProbe)
    },
  ]

  private static func blocking(
    _ name: String, mainOnce: Bool, _ loop: @escaping @Sendable (Int) -> Int
  ) -> Candidate {
    Candidate(
      name: name, isMainOnce: mainOnce, onMainQueue: { loop($0) },
      onOtherThread: .blocking(loop))
  }

  private static func suspending(
    _ name: String, mainOnce: Bool, _ loop: @escaping @Sendable (Int) async -> Int
  ) -> Candidate {
    Candidate(
      name: name, isMainOnce: mainOnce, onMainQueue: { await loop($0) },
      onOtherThread: .suspending(loop))
  }
}
