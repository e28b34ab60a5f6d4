import CFixtureShims
import Dispatch
import Foundation
import MainOnceFixtureSupport
import Synchronization
import _CMainOnceShims

// Testable: whether the Swift runtime's side tables read as MainOnce expects is internal.
@testable import MainOnce

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// What MainOnce reads of the platform, checked on the platform it runs on:
/// `MainOnceFixture platform facts`. For trying an architecture CI does not run
/// (`Scripts/arm64.sh` runs it under emulation), and run on every `swift test` where CI does.
///
/// It checks the thread-id system call (the main thread's id is the pid, another thread's is
/// not), libdispatch's queue layout (`mainonce_main_queue_layout_check`, then
/// `mainonce_queue_layout_self_test`), the Swift runtime's side-table layout that per-object cells
/// read (`ObjectLifetimes`' self-test), and, after `dispatchMain()`, a hop: the initializer, in a
/// main-queue block on a worker thread, must read as main context, and so must a `sync` nested in
/// it, which only the lock word can tell; `MainContext.isExact` must still hold after the hop
/// confirmed the owner. It reports the wait board's barrier path: `membarrier` when the process
/// registered for it at load and a heavy barrier runs it now, else `seqcst`, the sequentially
/// consistent fallback, with what `membarrier` answered. Either path passes; a `membarrier` that
/// registered and then fails does not. One line: `PASS arch=… barrier=… …` or `FAIL …`.
enum PlatformScenario: String, CaseIterable {
  case facts

  private enum Tokens {
    static let token = MainOnceToken("platform facts")
  }

  /// Set by the other thread and by the hop; read once they are done.
  private static let otherThreadID = Atomic<Int32>(0)
  private static let hopWasMainContext = Atomic(false)
  private static let nestedSyncWasMainContext = Atomic(false)
  private static let callerWasMainContext = Atomic(true)

  func run() -> Never {
    Watchdog.start(seconds: 20)
    var facts = ["arch=\(Self.architecture)"]
    var failures: [String] = []

    // The thread-id system call.
    let main = mainonce_thread_id()
    if main != getpid() {
      failures.append("the main thread's id \(main) is not the pid \(getpid())")
    }
    let other = Thread { Self.otherThreadID.store(mainonce_thread_id(), ordering: .releasing) }
    other.start()
    guard waitUntil(timeout: .seconds(10), { Self.otherThreadID.load(ordering: .acquiring) != 0 })
    else { verdict(false, "a thread of its own never ran") }
    let otherID = Self.otherThreadID.load(ordering: .acquiring)
    if otherID <= 0 || otherID == main { failures.append("another thread's id is \(otherID)") }
    facts.append("tid=\(failures.isEmpty ? "ok" : "wrong")")

    // libdispatch's queue layout: the main queue read only, then private queues.
    let layoutCheck = mainonce_main_queue_layout_check()
    let selfTest = mainonce_queue_layout_self_test()
    facts += ["layoutCheck=\(layoutCheck)", "layoutSelfTest=\(selfTest)"]
    if layoutCheck != 0 { failures.append("the main queue's layout failed check \(layoutCheck)") }
    if selfTest != 0 { failures.append("the queue layout self-test failed check \(selfTest)") }

    // The Swift runtime's side tables, which per-object cells read.
    facts.append("sideTables=\(ObjectLifetimes.areReadable ? "read" : "weakLoads")")
    if !ObjectLifetimes.areReadable {
      failures.append("side tables do not read as MainOnce expects: cells fall back to weak loads")
    }

    // The wait board's barrier path.
    let registered = mainonce_wait_board_tag() == 0
    let query = fixture_membarrier_query()
    let heavy = mainonce_heavy_barrier()
    let queried = query >= 0 ? "0x" + String(query, radix: 16) : "errno\(-query)"
    facts.append(
      (registered && heavy == 0 ? "barrier=membarrier" : "barrier=seqcst")
        + " membarrierQuery=\(queried) heavyBarrier=\(heavy)")
    if registered && heavy != 0 {
      failures.append("membarrier registered at load, and a heavy barrier then failed: \(heavy)")
    }

    // A hop after dispatchMain(): main context on a worker thread, and in a sync nested there.
    let (factsSoFar, failuresSoFar) = (facts, failures)
    let caller = Thread {
      var (facts, failures) = (factsSoFar, failuresSoFar)
      Self.callerWasMainContext.store(MainContext.isCurrent, ordering: .relaxed)
      onceOnMain(token: Tokens.token) {
        Self.hopWasMainContext.store(MainContext.isCurrent, ordering: .relaxed)
        let nested = DispatchQueue(label: "fixture.platform.nested").sync { MainContext.isCurrent }
        Self.nestedSyncWasMainContext.store(nested, ordering: .relaxed)
      }
      if Self.callerWasMainContext.load(ordering: .relaxed) {
        failures.append("a thread of its own read as main context")
      }
      if !Self.hopWasMainContext.load(ordering: .relaxed) {
        failures.append("the initializer, on the main queue, did not read as main context")
      }
      let nested = Self.nestedSyncWasMainContext.load(ordering: .relaxed)
      facts += ["exact=\(MainContext.isExact)", "nestedSync=\(nested)"]
      if !MainContext.isExact { failures.append("MainContext.isExact is false") }
      if !nested {
        failures.append("a sync nested in a main-queue block did not read as main context")
      }
      let summary = (facts + failures.map { "(\($0))" }).joined(separator: " ")
      verdict(failures.isEmpty, summary)
    }
    caller.start()
    dispatchMain()
  }

  private static var architecture: String {
    #if arch(arm64)
      "arm64"
    #elseif arch(x86_64)
      "x86_64"
    #else
      "other"
    #endif
  }
}
