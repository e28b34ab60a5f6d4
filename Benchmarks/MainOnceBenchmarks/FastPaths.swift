import CBenchmarkSupport
import Dispatch
import Foundation
import MainOnce
import Synchronization

/// The fast paths under test, all on state that is already done.
///
/// Each is measured through a *probe*: a function the optimizer may not inline, that makes one
/// access, as a call site in some other function would. Measured in a tight loop instead, some
/// accesses would be hoisted out of it (the optimizer moves a `static let`'s lazy-init check out
/// of loops), and the comparison would be of loops, not of calls. Every probe pays the same call
/// and return; the empty probe shows that share.
enum FastPaths {
  final class Box: Sendable {
    let value: Int
    init(_ value: Int) { self.value = value }
  }

  static let token = MainOnceToken("benchmark")
  static let lazy = MainLazy { 42 }
  static let asyncLazy = AsyncMainLazy { 42 }
  // Initialized from a value only known at run time, as a real singleton's state is: a class
  // instance the compiler could build at compile time would need no lazy initialization.
  static let staticLetObject = Box(Int(getpid()))
  @MainActor static let mainActorObject = Box(Int(getpid()))
  static let mutexFlag = Mutex(true)
  static let object = Box(7)
  // This is safe because the predicate is only written by `dispatch_once_f`, which
  // synchronizes, in `prepare`, before any probe reads it.
  nonisolated(unsafe) static let khanPredicate: UnsafeMutablePointer<Int> = {
    let predicate = UnsafeMutablePointer<Int>.allocate(capacity: 1)
    predicate.initialize(to: 0)
    return predicate
  }()

  /// Makes every fast path done, from main-actor code after `dispatchMain()`.
  @MainActor
  static func prepare(using worker: WorkerThread) async throws {
    prepareBlocking()
    _ = try await asyncLazy.get()
    // The Khan port must not run here: on a main-queue worker thread `Thread.isMainThread` is
    // false, and its `main.sync` from the main queue would trap. That is its Linux bug.
    await worker.run { KhanPort.onceOnMainThread(khanPredicate) {} }
  }

  /// Makes every blocking fast path but the Khan port's done, from main context.
  @MainActor
  static func prepareBlocking() {
    onceOnMainInPlace()
    _ = lazy.value
    _ = perObjectProbe()  // per-object state is per call site: prepare the probe's own
    _ = bench_dispatch_once_probe()
    _ = bench_pthread_once_probe()
  }

  /// The blocking form, called from synchronous code (in an async context the async overload
  /// would be chosen).
  private static func onceOnMainInPlace() {
    onceOnMain(token: token) {}
  }

  // MARK: - Probes

  // The empty async probe calls an empty C function, which the optimizer cannot see into (the
  // blocking empty probe calls it directly): no memory write that another thread's cache line
  // could slow down.
  @inline(never) static func emptyAsyncProbe() async -> Int { bench_empty_probe() }

  @inline(never) static func onceOnMainProbe() -> Int {
    onceOnMain(token: token) {}
    return 1
  }

  @inline(never) static func mainLazyProbe() -> Int { lazy.value }

  @inline(never) static func perObjectProbe() -> Int {
    onceOnMain(for: object) {}
    return 1
  }

  @inline(never) static func mainContextProbe() -> Int { MainContext.isCurrent ? 1 : 0 }

  @inline(never) static func staticLetProbe() -> Int { staticLetObject.value }

  @MainActor @inline(never) static func mainActorStaticLetProbe() -> Int {
    mainActorObject.value
  }

  @inline(never) static func mutexProbe() -> Int { mutexFlag.withLock { $0 } ? 1 : 0 }

  @inline(never) static func khanPortProbe() -> Int {
    KhanPort.onceOnMainThread(khanPredicate) {}
    return 1
  }

  @inline(never) static func asyncOnceOnMainProbe() async -> Int {
    do { try await onceOnMain(token: token) {} } catch { return 0 }
    return 1
  }

  @inline(never) static func asyncLazyProbe() async -> Int {
    (try? await asyncLazy.get()) ?? 0
  }
}

/// Calls `probe` `iterations` times and returns the sum, so that no call can be dropped.
@inline(__always)
func repeatProbe(_ iterations: Int, _ probe: () -> Int) -> Int {
  var sum = 0
  for _ in 0..<iterations { sum &+= probe() }
  return sum
}

@inline(__always)
func repeatProbe(_ iterations: Int, _ probe: () async -> Int) async -> Int {
  var sum = 0
  for _ in 0..<iterations { sum &+= await probe() }
  return sum
}
