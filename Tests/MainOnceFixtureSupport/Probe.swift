public import Dispatch
import Foundation
import MainOnce
import Synchronization

/// How a scenario's process serves the main queue.
public enum Driver: String, Sendable {
  case dispatchMain, runLoop, asyncMain, none
}

/// Where a scenario's callers call from.
public enum CallingContext: String, Sendable {
  case topLevel, mainBlock, mainActor, background, nestedSync, mixed
}

enum Tokens {
  static let token = MainOnceToken("fixture")
}

/// Set on the main queue, so that a block can prove it runs on it without MainOnce's help.
public let mainQueueKey: DispatchSpecificKey<Bool> = {
  let key = DispatchSpecificKey<Bool>()
  DispatchQueue.main.setSpecific(key: key, value: true)
  return key
}()

/// Records what the initializer and its callers saw, independently of MainOnce.
public final class Probe: Sendable {
  /// Creates a probe with nothing recorded.
  public init() {}

  private let runs = Atomic(0)
  private let finished = Atomic(false)
  private let earlyReturns = Atomic(0)
  private let calls = Atomic(0)
  private let ranInMainContext = Atomic(false)
  private let ranOnMainThread = Atomic(false)
  /// The thread of the main-queue block a nested caller came from (0: none).
  private let nestedOuterThread = Atomic<UInt>(0)

  /// Calls `onceOnMain` and checks that the initializer had finished before it returned.
  public func call() {
    let outer = nestedOuterThread.load(ordering: .acquiring)
    onceOnMain(token: Tokens.token) {
      let onMainQueue = DispatchQueue.getSpecific(key: mainQueueKey) == true
      let inOuterBlock = outer != 0 && outer == UInt(pthread_self())
      ranInMainContext.store(onMainQueue || inOuterBlock, ordering: .relaxed)
      ranOnMainThread.store(Thread.isMainThread, ordering: .relaxed)
      runs.add(1, ordering: .relaxed)
      usleep(20_000)  // widen the window for racing callers
      finished.store(true, ordering: .releasing)
    }
    calls.add(1, ordering: .relaxed)
    if !finished.load(ordering: .acquiring) { earlyReturns.add(1, ordering: .relaxed) }
  }

  /// Starts `threads` threads that call at the same moment.
  public func race(threads: Int, group: DispatchGroup) {
    let gate = StartGate(parties: threads)
    for _ in 0..<threads {
      group.enter()
      let thread = Thread {
        gate.arriveAndWait()
        self.call()
        group.leave()
      }
      thread.start()
    }
  }

  /// Calls from a main-queue block, optionally inside `queue.sync` within it.
  public func callFromMainQueue(nestedIn queue: DispatchQueue? = nil, group: DispatchGroup) {
    group.enter()
    DispatchQueue.main.async {
      guard DispatchQueue.getSpecific(key: mainQueueKey) == true else {
        self.fail("a main-queue block did not see the main queue's key")
      }
      self.call(nestedIn: queue)
      group.leave()
    }
  }

  /// Calls from main-actor code, optionally inside `queue.sync` within it.
  @MainActor
  public func callFromMainActor(nestedIn queue: DispatchQueue? = nil) {
    guard DispatchQueue.getSpecific(key: mainQueueKey) == true else {
      fail("main-actor code did not see the main queue's key")
    }
    call(nestedIn: queue)
  }

  private func call(nestedIn queue: DispatchQueue?) {
    guard let queue else { return call() }
    nestedOuterThread.store(UInt(pthread_self()), ordering: .releasing)
    queue.sync { call() }
  }

  /// Checks what was recorded, prints the verdict and exits.
  public func finish(driver: Driver, context: CallingContext) -> Never {
    let runs = runs.load(ordering: .acquiring)
    let summary =
      "runs=\(runs) calls=\(calls.load(ordering: .relaxed))"
      + " earlyReturns=\(earlyReturns.load(ordering: .relaxed))"
      + " mainContext=\(ranInMainContext.load(ordering: .relaxed))"
      + " mainThread=\(ranOnMainThread.load(ordering: .relaxed))"
      + " driver=\(driver.rawValue) context=\(context.rawValue)"
    guard runs == 1, earlyReturns.load(ordering: .relaxed) == 0,
      ranInMainContext.load(ordering: .relaxed)
    else { fail(summary) }
    print("PASS " + summary)
    exit(0)
  }

  /// Prints a failing verdict and exits.
  public func fail(_ message: String) -> Never {
    print("FAIL " + message)
    exit(1)
  }
}

/// Ends a scenario that hangs, so that a broken build fails instead of stalling the tests.
public enum Watchdog {
  /// Exits with a failing verdict after `seconds`.
  public static func start(seconds: Int) {
    DispatchQueue.global().asyncAfter(deadline: .now() + .seconds(seconds)) {
      print("FAIL timed out after \(seconds) s")
      exit(3)
    }
  }
}

/// Releases a set of threads at the same moment.
public final class StartGate: Sendable {
  private let parties: Int
  private let arrived = Atomic(0)

  /// A gate for `parties` threads.
  public init(parties: Int) { self.parties = parties }

  /// Waits until every party has arrived.
  public func arriveAndWait() {
    arrived.add(1, ordering: .acquiringAndReleasing)
    while arrived.load(ordering: .acquiring) < parties { sched_yield() }
  }
}
