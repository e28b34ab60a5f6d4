public import Dispatch
import Foundation
public import Synchronization

@testable public import MainOnce

/// How a scenario's process serves the main queue.
public enum Driver: String, Sendable {
  case dispatchMain, runLoop, asyncMain, none
  /// An event loop of the scenario's own, serving the main queue with `MainQueueDriver`.
  case mainQueueDriver
}

/// Where a scenario's callers call from.
public enum CallingContext: String, Sendable {
  case topLevel, mainBlock, mainActor, background, nestedSync, mixed
  /// ``Stress``, while the driver serves the main queue.
  case stress
}

enum Tokens {
  static let token = MainOnceToken("fixture")
}

/// Set on the main queue, so that a block can prove it runs on it without MainOnce's help.
public var mainQueueKey: DispatchSpecificKey<Bool> { mainQueueKeyBox.key }

private let mainQueueKeyBox: MainQueueKey = {
  let key = DispatchSpecificKey<Bool>()
  DispatchQueue.main.setSpecific(key: key, value: true)
  return MainQueueKey(key: key)
}()

/// The key in a `Sendable` box: Swift 6.0's Dispatch does not mark `DispatchSpecificKey`
/// `Sendable` (later ones do).
private struct MainQueueKey {
  let key: DispatchSpecificKey<Bool>
}

// This is safe because a `DispatchSpecificKey` has no state of its own after `init`: libdispatch
// uses only its address, as the key, and the box never changes the reference it holds.
extension MainQueueKey: @unchecked Sendable {}

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
      + " workItems=\(Instrumentation.mainQueueWorkItems)"
      + " exact=\(MainContext.isExact)"
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
  /// Exits with a failing verdict after `seconds`, times ``TimeScale/factor``.
  public static func start(seconds: Int) {
    let limit = TimeScale.seconds(Double(seconds))
    DispatchQueue.global().asyncAfter(deadline: .now() + limit) {
      print("FAIL timed out after \(String(format: "%g", limit)) s")
      exit(3)
    }
  }
}

/// Waits until `condition` holds, looking every millisecond, for at most `timeout` (times
/// ``TimeScale/factor``); returns whether it held.
///
/// For a scenario that needs another thread to have reached a point (parked in MainOnce, asleep
/// in a wait) before it goes on: a sleep only makes that likely, and under load it is not.
public func waitUntil(timeout: Duration = .seconds(10), _ condition: () -> Bool) -> Bool {
  let deadline = ContinuousClock.now + timeout.scaled
  while !condition() {
    if ContinuousClock.now > deadline { return false }
    usleep(1_000)
  }
  return true
}

/// Waits until at least `count` threads are parked in a wait of MainOnce's own
/// (`Instrumentation.parkedThreads`), for at most `timeout` (scaled); returns whether they are.
public func waitUntilParked(_ count: Int = 1, timeout: Duration = .seconds(10)) -> Bool {
  waitUntil(timeout: timeout) { Instrumentation.parkedThreads >= count }
}

/// Kernel threads, as `/proc/self/task` shows them.
public enum KernelThread {
  /// The calling thread's id (what `gettid()` returns), read from `/proc/thread-self`.
  public static var current: Int32 {
    var link = [CChar](repeating: 0, count: 64)
    let length = readlink("/proc/thread-self", &link, link.count - 1)
    guard length > 0 else { return 0 }
    let path = String(decoding: link[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return path.split(separator: "/").last.flatMap { Int32($0) } ?? 0
  }

  /// Whether thread `id` of this process is asleep (state `S` or `D` in its `stat`).
  public static func isAsleep(_ id: Int32) -> Bool {
    let state = self.state(of: id)
    return state == "S" || state == "D"
  }

  /// How often thread `id` of this process has gone to sleep of its own accord so far
  /// (`voluntary_ctxt_switches` in its `status`): each wake-up from a wait counts one.
  public static func voluntarySwitches(of id: Int32) -> Int? {
    guard
      let status = try? String(contentsOfFile: "/proc/self/task/\(id)/status", encoding: .utf8),
      let line = status.split(separator: "\n").first(where: {
        $0.hasPrefix("voluntary_ctxt_switches:")
      })
    else { return nil }
    return line.split(separator: ":").last.flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }
  }

  /// The state letter in thread `id`'s `stat`, or `nil` if it cannot be read.
  private static func state(of id: Int32) -> Character? {
    guard let stat = try? String(contentsOfFile: "/proc/self/task/\(id)/stat", encoding: .utf8),
      let end = stat.lastIndex(of: ")")
    else { return nil }
    return stat[stat.index(after: end)...].drop { $0 == " " }.first
  }
}

/// Releases a set of threads at the same moment.
public final class StartGate: Sendable {
  private let parties: Int
  private let arrived = Atomic(0)

  /// A gate for `parties` threads.
  public init(parties: Int) { self.parties = parties }

  /// Waits until every party has arrived, for at most `timeout` (scaled); returns whether they
  /// did.
  @discardableResult
  public func arriveAndWait(timeout: Duration = .seconds(30)) -> Bool {
    arrived.add(1, ordering: .acquiringAndReleasing)
    let deadline = ContinuousClock.now + timeout.scaled
    while arrived.load(ordering: .acquiring) < parties {
      if ContinuousClock.now > deadline { return false }
      sched_yield()
    }
    return true
  }
}

/// Counts what initializers and their callers saw.
public final class RaceTally: Sendable {
  private let hold: UInt32

  /// A tally with nothing counted, whose initializer takes `hold` microseconds, so that racing
  /// callers pile up behind it.
  public init(hold: UInt32 = 0) {
    self.hold = hold
  }

  /// How many times the initializer ran.
  public let runs = Atomic(0)
  /// How many callers returned before it had finished.
  public let earlyReturns = Atomic(0)
  /// Set at the end of the initializer.
  public let finished = Atomic(false)
  /// Cleared if the initializer ran outside main context.
  public let ranInMainContext = Atomic(true)
  /// What the initializer builds: plain memory with no synchronization of its own. Callers read
  /// it right after `onceOnMain` returns, before they touch this tally's atomics, so only
  /// MainOnce orders the write before the reads: ThreadSanitizer (in CI) reports a race if it
  /// does not. This is deliberately unsynchronized, which is why it is `nonisolated(unsafe)`.
  nonisolated(unsafe) private let built: UnsafeMutablePointer<Int> = {
    let built = UnsafeMutablePointer<Int>.allocate(capacity: 1)
    built.initialize(to: 0)
    return built
  }()

  deinit { built.deallocate() }

  /// The initializer: checks main context independently of MainOnce, counts, builds, and marks
  /// the end.
  @MainActor
  public func initialize() {
    if !MainContext.isCurrent || DispatchQueue.getSpecific(key: mainQueueKey) != true {
      ranInMainContext.store(false, ordering: .relaxed)
    }
    runs.add(1, ordering: .relaxed)
    if hold > 0 { usleep(hold) }
    built.pointee = 42
    finished.store(true, ordering: .releasing)
  }

  /// Called by each caller after `onceOnMain` returned: it must see what the initializer built.
  public func returned() {
    let seen = built.pointee
    if seen != 42 || !finished.load(ordering: .acquiring) {
      earlyReturns.add(1, ordering: .relaxed)
    }
  }
}

/// Fresh tokens on the heap, for scenarios that need many.
public final class TokenBuffer: @unchecked Sendable {
  // This is safe because the tokens are initialized before the buffer is shared, never moved,
  // and only read through MainOnce, which synchronizes them.
  private let tokens: UnsafeMutablePointer<MainOnceToken>
  private let count: Int

  /// `count` fresh tokens.
  public init(count: Int) {
    self.count = count
    tokens = .allocate(capacity: count)
    for index in 0..<count { (tokens + index).initialize(to: MainOnceToken("stress")) }
  }

  deinit {
    tokens.deinitialize(count: count)
    tokens.deallocate()
  }

  /// The token at `index`. An address, not a `_read` coroutine: Swift 6.0 and 6.2 reject a
  /// borrow of a noncopyable value yielded by `_read` where a `borrowing` argument takes it.
  public subscript(index: Int) -> MainOnceToken {
    unsafeAddress { UnsafePointer(tokens + index) }
  }

  /// Whether the token at `index` is done. Swift 6.0 rejects `buffer[index].isDone`, reading a
  /// property of a noncopyable value through a subscript, as a consume of a borrow.
  public func isDone(at index: Int) -> Bool {
    tokens[index].isDone
  }
}

/// Many fresh tokens raced by many threads and by main-queue blocks at once.
public enum Stress {
  /// What a stress run saw.
  public struct Outcome: Sendable, CustomStringConvertible {
    /// Calls made.
    public var uses = 0
    /// Tokens whose initializer ran more than once.
    public var doubleRuns = 0
    /// Tokens whose initializer never ran.
    public var missedRuns = 0
    /// Calls that returned before the initializer had finished.
    public var earlyReturns = 0
    /// Initializers that ran outside main context.
    public var outsideMainContext = 0
    /// Whether a round's callers did not all return within a minute (scaled).
    public var timedOut = false

    /// Whether nothing went wrong.
    public var isClean: Bool {
      doubleRuns == 0 && missedRuns == 0 && earlyReturns == 0 && outsideMainContext == 0
        && !timedOut
    }

    /// One line, `key=value` pairs.
    public var description: String {
      "uses=\(uses) doubleRuns=\(doubleRuns) missedRuns=\(missedRuns)"
        + " earlyReturns=\(earlyReturns) outsideMainContext=\(outsideMainContext)"
        + " timedOut=\(timedOut)"
    }
  }

  /// Runs a stress on a new thread while the caller goes on to serve the main queue, then
  /// prints the verdict and exits: about 10⁴ calls, or 10⁶ in the long mode.
  public static func startInBackground(driver: Driver) {
    Thread {
      let outcome = run(rounds: isLong ? 1_800 : 20)
      print("\(outcome.isClean ? "PASS" : "FAIL") \(outcome) driver=\(driver.rawValue)")
      exit(outcome.isClean ? 0 : 1)
    }.start()
  }

  /// Whether the long mode is on (`MAINONCE_STRESS=long`).
  public static let isLong = ProcessInfo.processInfo.environment["MAINONCE_STRESS"] == "long"

  /// Runs `rounds` rounds. In each, `threads` threads and one main-queue block call every one of
  /// `tokens` fresh tokens, each in its own order; each initializer takes about 20 µs, so that
  /// callers overlap it. Blocks the calling thread, which must not be the main queue or a Swift
  /// concurrency thread; stops early if a round takes over a minute (scaled).
  public static func run(rounds: Int, tokens count: Int = 64, threads: Int = 8) -> Outcome {
    var outcome = Outcome()
    for _ in 0..<rounds {
      let tokens = TokenBuffer(count: count)
      let tallies = (0..<count).map { _ in RaceTally(hold: 20) }
      let callers = DispatchGroup()
      let gate = StartGate(parties: threads + 1)
      @Sendable func callEvery(from caller: Int) {
        gate.arriveAndWait()
        for step in 0..<count {
          let tally = tallies[(step * 7 + caller * 13) % count]
          onceOnMain(token: tokens[(step * 7 + caller * 13) % count]) { tally.initialize() }
          tally.returned()
        }
        callers.leave()
      }
      for caller in 0..<threads {
        callers.enter()
        Thread { callEvery(from: caller) }.start()
      }
      callers.enter()
      DispatchQueue.main.async { callEvery(from: threads) }
      guard callers.wait(timeout: .now() + TimeScale.seconds(60)) == .success else {
        outcome.timedOut = true
        return outcome
      }
      outcome.uses += count * (threads + 1)
      for tally in tallies {
        let runs = tally.runs.load(ordering: .relaxed)
        if runs > 1 { outcome.doubleRuns += 1 }
        if runs == 0 { outcome.missedRuns += 1 }
        outcome.earlyReturns += tally.earlyReturns.load(ordering: .relaxed)
        if !tally.ranInMainContext.load(ordering: .relaxed) { outcome.outsideMainContext += 1 }
      }
    }
    return outcome
  }
}
