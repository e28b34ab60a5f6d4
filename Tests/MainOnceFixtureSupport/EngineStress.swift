import Dispatch
import Foundation
import MainOnce
import Synchronization

/// A randomized stress of the once engine, run while a driver serves the main queue.
///
/// Each round makes fresh tokens, each in a short-lived class object (as in
/// `final class Thing { let token = MainOnceToken() }`), and calls every token from a random mix
/// of callers: blocking callers on worker threads, main-queue blocks that run the token in place,
/// async callers (some cancelled at random moments), main-actor async callers (in place), and
/// completion callers answered on a global queue or on the main queue; and waits that never
/// initialize (blocking on threads of their own, async, some cancelled, completion), with, once
/// the round's callers have answered, a main-queue block that waits for tokens in main context
/// and serves the closing calls' hops. About a quarter of the initializers throw. When every caller has answered, a closing blocking call makes sure each
/// token is done, and the objects are released; the next round's objects reuse their addresses
/// (the verdict counts how many), while hops left over from the last round may still be queued:
/// main-queue blocks hold the main queue for random times before and after their in-place calls.
///
/// It checks that each token's initializer succeeded exactly once; that no initializer ran after
/// one had succeeded, overlapped another, or ran outside main context; that no caller returned
/// before a successful initializer for its token had returned; that every error reached the
/// caller whose initializer threw it; and that every caller and completion answered within a
/// bound. Short by default (3 s); `MAINONCE_STRESS=long` runs 10 minutes;
/// `MAINONCE_STRESS_SECONDS` sets the length and `MAINONCE_STRESS_SEED` the random seed.
public enum EngineStress {
  /// What a stress run saw.
  public struct Outcome: Sendable, CustomStringConvertible {
    /// The seed of the random schedule.
    public var seed: UInt64 = 0
    /// Rounds run.
    public var rounds = 0
    /// Calls made.
    public var calls = 0
    /// Objects allocated at an address an earlier object of a previous round had.
    public var reusedAddresses = 0
    /// Tokens whose initializer succeeded more than once.
    public var doubleSuccesses = 0
    /// Tokens whose initializer never succeeded, even after the closing call.
    public var missedSuccesses = 0
    /// Initializers that started after one had succeeded for the same token.
    public var runsAfterSuccess = 0
    /// Initializers that ran while another one for the same token was running.
    public var overlaps = 0
    /// Initializers that ran outside main context.
    public var outsideMainContext = 0
    /// Callers that returned, or completions that reported success, before any initializer for
    /// their token had succeeded.
    public var earlyReturns = 0
    /// ``earlyReturns`` by kind of caller.
    public var earlyReturnsByKind: [String: Int] = [:]
    /// Errors that reached a caller whose own initializer did not throw them.
    public var foreignErrors = 0
    /// Async callers that ended with `CancellationError`.
    public var cancellations = 0
    /// Callers that got their own initializer's error.
    public var thrown = 0
    /// Callers that had not answered when a round gave up waiting.
    public var unanswered = 0
    /// The kinds of callers that had not answered, with counts.
    public var unansweredKinds = ""
    /// Whether a round gave up waiting.
    public var timedOut = false

    /// Whether nothing went wrong (and some address was reused, so the run proved something).
    public var isClean: Bool {
      doubleSuccesses == 0 && missedSuccesses == 0 && runsAfterSuccess == 0 && overlaps == 0
        && outsideMainContext == 0 && earlyReturns == 0 && foreignErrors == 0 && unanswered == 0
        && !timedOut && reusedAddresses > 0
    }

    /// One line, `key=value` pairs.
    public var description: String {
      "rounds=\(rounds) calls=\(calls) reusedAddresses=\(reusedAddresses)"
        + " doubleSuccesses=\(doubleSuccesses) missedSuccesses=\(missedSuccesses)"
        + " runsAfterSuccess=\(runsAfterSuccess) overlaps=\(overlaps)"
        + " outsideMainContext=\(outsideMainContext) earlyReturns=\(earlyReturns)"
        + (earlyReturnsByKind.isEmpty
          ? ""
          : " earlyReturnKinds="
            + earlyReturnsByKind.map { "\($0.key):\($0.value)" }.sorted().joined(separator: ","))
        + " foreignErrors=\(foreignErrors) unanswered=\(unanswered)"
        + (unansweredKinds.isEmpty ? "" : " unansweredKinds=\(unansweredKinds)")
        + " timedOut=\(timedOut) cancellations=\(cancellations) thrown=\(thrown) seed=\(seed)"
    }
  }

  /// Whether the long mode is on (`MAINONCE_STRESS=long`).
  public static var isLong: Bool { Stress.isLong }

  /// How long a stress process may run before its watchdog ends it (``Watchdog`` scales it).
  public static var watchdogSeconds: Int { Int(seconds) + 60 }

  static var seconds: Double {
    ProcessInfo.processInfo.environment["MAINONCE_STRESS_SECONDS"].flatMap(Double.init)
      ?? (isLong ? 600 : 3)
  }

  /// Runs the stress on a new thread while the caller goes on to serve the main queue, then
  /// prints the verdict and exits.
  public static func startInBackground(driver: Driver) {
    Thread {
      let seed =
        ProcessInfo.processInfo.environment["MAINONCE_STRESS_SEED"].flatMap { UInt64($0) }
        ?? UInt64.random(in: 1...UInt64.max)
      let outcome = run(seconds: seconds, seed: seed)
      print("\(outcome.isClean ? "PASS" : "FAIL") \(outcome) driver=\(driver.rawValue)")
      exit(outcome.isClean ? 0 : 1)
    }.start()
  }

  /// Runs rounds for `seconds`. Blocks the calling thread, which must not hold the main queue
  /// or be a Swift concurrency thread.
  public static func run(seconds: Double, seed: UInt64) -> Outcome {
    var outcome = Outcome()
    outcome.seed = seed
    var random = SplitMix64(seed: seed)
    var seen = Set<UInt>()
    let end = DispatchTime.now() + seconds
    var handover: DispatchSemaphore?
    while DispatchTime.now() < end {
      handover = runRound(
        &outcome, &random, seen: &seen, handover: handover,
        handingOver: random.next() % 2 == 0)
      outcome.rounds += 1
      if outcome.timedOut { break }
    }
    handover?.signal()
    return outcome
  }

  enum Kind: String, CaseIterable {
    case blocking, mainInPlace, async, asyncCancelled, mainActorAsync, completionGlobal,
      completionMain, waitBlocking, waitAsync, waitAsyncCancelled, waitCompletion, waitMain

    /// Whether the call waits without an initializer: it may wait until the closing calls.
    var isWait: Bool { rawValue.hasPrefix("wait") }
  }

  struct Call {
    let token: Int
    let kind: Kind
    let caller: Int
    let throwing: Bool
  }

  /// Runs one round. `handover`, from the previous round, is signalled once this round's
  /// blocking callers have started. If `handingOver`, the round has only callers that do not
  /// need the main queue to answer, a main-queue block runs every token in place (leaving the
  /// hops those callers sent unnecessary), and the block keeps holding the main queue until the
  /// next round signals the returned semaphore (at most 5 ms).
  private static func runRound(
    _ outcome: inout Outcome, _ random: inout SplitMix64, seen: inout Set<UInt>,
    handover previous: DispatchSemaphore?, handingOver: Bool
  ) -> DispatchSemaphore? {
    let tokenCount = 16
    let callsPerToken = 8
    let workerThreads = 6
    let mainBlocks = 2
    let owners = OwnerTable((0..<tokenCount).map { _ in StressOwner() })
    for owner in owners.all {
      if !seen.insert(UInt(bitPattern: Unmanaged.passUnretained(owner).toOpaque())).inserted {
        outcome.reusedAddresses += 1
      }
    }
    let tallies = (0..<tokenCount).map { _ in TokenTally() }
    let log = RoundLog()
    var calls: [Call] = []
    // Blocking callers count twice: a blocking caller first on a token sends a synchronous hop,
    // which a hop left over from the last round can overtake.
    let kinds: [Kind] =
      handingOver
      ? [.async, .asyncCancelled, .completionGlobal]
      : Kind.allCases.filter { $0 != .waitMain } + [.blocking]
    for token in 0..<tokenCount {
      for _ in 0..<callsPerToken {
        let kind = kinds[Int(random.next() % UInt64(kinds.count))]
        calls.append(
          Call(token: token, kind: kind, caller: calls.count, throwing: random.next() % 4 == 0))
      }
    }
    calls.shuffle(using: &random)
    // In a handing-over round, one main-queue block runs every token in place.
    let inPlaceCalls = (0..<tokenCount).map {
      Call(token: $0, kind: .mainInPlace, caller: calls.count + $0, throwing: false)
    }
    // Waits may last until the closing calls: they are counted apart.
    let answered = DispatchGroup()
    let waited = DispatchGroup()
    for call in calls + (handingOver ? inPlaceCalls : []) {
      log.started(call.kind)
      (call.kind.isWait ? waited : answered).enter()
    }

    /// Records how a caller's call ended and counts the answer.
    @Sendable func finish(_ call: Call, _ result: Result<Void, any Error>) {
      let tally = tallies[call.token]
      switch result {
      case .success:
        if !tally.hasSucceeded { log.earlyReturn(call.kind.rawValue) }
      case .failure(let error as StressError):
        if error.caller != call.caller || !call.throwing {
          log.foreignErrors.add(1, ordering: .relaxed)
        }
        log.thrown.add(1, ordering: .relaxed)
      case .failure(is CancellationError):
        log.cancellations.add(1, ordering: .relaxed)
      case .failure:
        log.foreignErrors.add(1, ordering: .relaxed)
      }
      log.answered(call.kind)
      (call.kind.isWait ? waited : answered).leave()
    }

    var blockingBuckets = Array(repeating: [Call](), count: workerThreads)
    // Blocking waits on threads of their own, behind which no initializer waits.
    var waitBuckets = Array(repeating: [Call](), count: 3)
    var mainBuckets = Array(repeating: [Call](), count: mainBlocks)
    var cancellable: [Task<Void, Never>] = []
    // Main-queue blocks do not wait at the gate: one would hold the main queue while the other
    // could never arrive.
    let gate = StartGate(parties: workerThreads + 1)

    for call in calls {
      switch call.kind {
      case .blocking:
        blockingBuckets[Int(random.next() % UInt64(workerThreads))].append(call)
      case .mainInPlace:
        mainBuckets[Int(random.next() % UInt64(mainBlocks))].append(call)
      case .waitBlocking:
        waitBuckets[Int(random.next() % UInt64(waitBuckets.count))].append(call)
      default:
        break
      }
    }
    @Sendable func callBlocking(_ call: Call) {
      let tally = tallies[call.token]
      finish(
        call,
        Result { () throws(StressError) in
          try onceOnMain(token: owners[call.token].token) { () throws(StressError) in
            try tally.initialize(caller: call.caller, throwing: call.throwing)
          }
        }.mapError { $0 as any Error })
    }
    for bucket in blockingBuckets {
      Thread {
        gate.arriveAndWait()
        for call in bucket { callBlocking(call) }
      }.start()
    }
    for bucket in waitBuckets {
      Thread {
        for call in bucket {
          owners[call.token].token.wait()
          finish(call, .success(()))
        }
      }.start()
    }
    // Each main-queue block holds the main queue a while before its in-place calls, so that
    // other callers' hops queue up behind it, and a while after them, so that the round may end
    // (and its objects be freed and their addresses reused) while hops made unnecessary by the
    // in-place runs are still queued.
    for bucket in mainBuckets {
      let before = useconds_t(random.next() % 400)
      let after = useconds_t(random.next() % 2_000)
      DispatchQueue.main.async {
        usleep(before)
        for call in bucket { callBlocking(call) }  // in place: this block holds the main queue
        usleep(after)
      }
    }
    let issued = DispatchSemaphore(value: 0)
    let nextHandover = handingOver ? DispatchSemaphore(value: 0) : nil
    if let nextHandover {
      DispatchQueue.main.async {
        // Hops of the callers below queue up behind this block...
        _ = issued.wait(timeout: .now() + 0.05)
        usleep(300)  // let the async callers queue
        // ...and running every token here makes them unnecessary.
        for call in inPlaceCalls { callBlocking(call) }
        // Hold the main queue while the next round's objects take these addresses.
        _ = nextHandover.wait(timeout: .now() + 0.005)
      }
    }
    gate.arriveAndWait()
    if let previous {
      usleep(200)  // let this round's blocking callers reach their hops
      previous.signal()
    }
    for call in calls {
      let owner = owners[call.token]
      let tally = tallies[call.token]
      /// An async call, made with the caller's isolation: on the main actor it runs in place.
      @Sendable func waitAsync() async {
        do {
          try await owner.token.wait()
          finish(call, .success(()))
        } catch {
          finish(call, .failure(error))
        }
      }
      @Sendable func callAsync(isolation: isolated (any Actor)? = #isolation) async {
        do {
          try await onceOnMain(token: owner.token) {
            try tally.initialize(caller: call.caller, throwing: call.throwing)
          }
          finish(call, .success(()))
        } catch {
          finish(call, .failure(error))
        }
      }
      switch call.kind {
      case .blocking, .mainInPlace, .waitBlocking, .waitMain:
        break
      case .async, .asyncCancelled:
        let task = Task.detached { await callAsync() }
        if call.kind == .asyncCancelled { cancellable.append(task) }
      case .waitAsync, .waitAsyncCancelled:
        let task = Task.detached { await waitAsync() }
        if call.kind == .waitAsyncCancelled { cancellable.append(task) }
      case .waitCompletion:
        owner.token.wait(completionQueue: .global()) { finish(call, .success(())) }
      case .mainActorAsync:
        Task { @MainActor in await callAsync() }
      case .completionGlobal, .completionMain:
        onceOnMain(
          token: owner.token,
          completionQueue: call.kind == .completionMain ? .main : .global()
        ) { () throws(StressError) in
          try tally.initialize(caller: call.caller, throwing: call.throwing)
        } completion: { result in
          finish(call, result.mapError { $0 as any Error })
        }
      }
    }
    issued.signal()
    // Cancel the chosen async callers at random moments around their await.
    let delays = cancellable.map { _ in useconds_t(random.next() % 300) }
    let cancelled = DispatchSemaphore(value: 0)
    let tasksToCancel = cancellable
    Thread {
      for (task, delay) in zip(tasksToCancel, delays) {
        if delay > 150 { usleep(delay - 150) }
        task.cancel()
      }
      cancelled.signal()
    }.start()
    let inTime = answered.wait(timeout: .now() + TimeScale.seconds(15)) == .success
    _ = cancelled.wait(timeout: .now() + TimeScale.seconds(5))
    outcome.calls += calls.count + (handingOver ? inPlaceCalls.count : 0)
    if !inTime {
      outcome.timedOut = true
      outcome.unanswered += log.unanswered.values.reduce(0, +)
      outcome.unansweredKinds = log.unanswered.filter { $0.value > 0 }
        .map { "\($0.key):\($0.value)" }.sorted().joined(separator: ",")
    }
    // A main-queue block waits, in main context, for four tokens that may not be done yet: it
    // serves the closing calls' hops, which cannot run while it blocks the main queue.
    if !handingOver {
      let mainWaits = (0..<4).map {
        Call(
          token: Int(random.next() % UInt64(tokenCount)), kind: .waitMain,
          caller: calls.count + tokenCount + $0, throwing: false)
      }
      for call in mainWaits {
        log.started(call.kind)
        waited.enter()
      }
      outcome.calls += mainWaits.count
      DispatchQueue.main.async {
        for call in mainWaits {
          owners[call.token].token.wait()
          finish(call, .success(()))
        }
      }
    }
    // Make sure every token is done, from a blocking caller off the main queue, bounded.
    let closed = DispatchSemaphore(value: 0)
    // Half the tokens get a throwing attempt first: one that the main-queue wait runs leaves its
    // hop on its way, so the closing call after it sends none, and only wakes the wait.
    let throwsFirst = (0..<tokenCount).map { _ in random.next() % 2 == 0 }
    Thread {
      for ((owner, tally), throwing) in zip(zip(owners.all, tallies), throwsFirst) {
        if throwing {
          _ = try? onceOnMain(token: owner.token) { () throws(StressError) in
            try tally.initialize(caller: -2, throwing: true)
          }
        }
        onceOnMain(token: owner.token) {
          try? tally.initialize(caller: -1, throwing: false)
        }
        if !tally.hasSucceeded { log.earlyReturn("closingCall") }
      }
      closed.signal()
    }.start()
    if closed.wait(timeout: .now() + TimeScale.seconds(15)) != .success {
      outcome.timedOut = true
      outcome.unanswered += 1
      outcome.unansweredKinds += (outcome.unansweredKinds.isEmpty ? "" : ",") + "closingCall"
    }
    // Every token is done: every wait ends.
    if waited.wait(timeout: .now() + TimeScale.seconds(15)) != .success {
      outcome.timedOut = true
      let pending = log.unanswered.filter { $0.value > 0 }
      outcome.unanswered += pending.values.reduce(0, +)
      outcome.unansweredKinds +=
        (outcome.unansweredKinds.isEmpty ? "" : ",")
        + pending.map { "\($0.key):\($0.value)" }.sorted().joined(separator: ",")
    }
    for tally in tallies {
      let successes = tally.successes.load(ordering: .acquiring)
      if successes > 1 { outcome.doubleSuccesses += 1 }
      if successes == 0 { outcome.missedSuccesses += 1 }
      outcome.runsAfterSuccess += tally.runsAfterSuccess.load(ordering: .relaxed)
      outcome.overlaps += tally.overlaps.load(ordering: .relaxed)
      outcome.outsideMainContext += tally.outsideMainContext.load(ordering: .relaxed)
    }
    for (kind, count) in log.earlyReturnsByKind {
      outcome.earlyReturns += count
      outcome.earlyReturnsByKind[kind, default: 0] += count
    }
    outcome.foreignErrors += log.foreignErrors.load(ordering: .relaxed)
    outcome.cancellations += log.cancellations.load(ordering: .relaxed)
    outcome.thrown += log.thrown.load(ordering: .relaxed)
    // The objects go now, on this thread, so that the next round's take their addresses.
    owners.clear()
    return nextHandover
  }
}

/// A short-lived owner of a token, padded to an allocation size little else uses.
final class StressOwner: Sendable {
  let token = MainOnceToken("stress owner")
  let padding: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) =
    (0, 0, 0, 0, 0, 0, 0, 0, 0)
}

/// A round's objects. Closures reach them through the table, so that clearing it at the end of
/// the round frees them even while a main-queue block that called them still runs.
final class OwnerTable: @unchecked Sendable {
  // This is safe because `owners` is only touched under `lock`.
  private let lock = NSLock()
  private var owners: [StressOwner]

  init(_ owners: [StressOwner]) { self.owners = owners }

  subscript(index: Int) -> StressOwner {
    lock.lock()
    defer { lock.unlock() }
    return owners[index]
  }

  var all: [StressOwner] {
    lock.lock()
    defer { lock.unlock() }
    return owners
  }

  func clear() {
    lock.lock()
    let released = owners
    owners = []
    lock.unlock()
    _ = released  // released here, outside the lock
  }
}

struct StressError: Error {
  let caller: Int
}

/// What the initializers of one token saw.
final class TokenTally: Sendable {
  let successes = Atomic(0)
  let running = Atomic(0)
  let overlaps = Atomic(0)
  let runsAfterSuccess = Atomic(0)
  let outsideMainContext = Atomic(0)

  var hasSucceeded: Bool { successes.load(ordering: .acquiring) > 0 }

  func initialize(caller: Int, throwing: Bool) throws(StressError) {
    if DispatchQueue.getSpecific(key: mainQueueKey) != true {
      outsideMainContext.add(1, ordering: .relaxed)
    }
    if running.add(1, ordering: .acquiringAndReleasing).newValue > 1 {
      overlaps.add(1, ordering: .relaxed)
    }
    if successes.load(ordering: .acquiring) > 0 { runsAfterSuccess.add(1, ordering: .relaxed) }
    usleep(UInt32(caller & 15))  // a few microseconds, so that callers overlap it
    running.subtract(1, ordering: .acquiringAndReleasing)
    if throwing { throw StressError(caller: caller) }
    successes.add(1, ordering: .releasing)
  }
}

/// What one round's callers saw.
final class RoundLog: @unchecked Sendable {
  // This is safe because `pending` is only touched under `lock`.
  let foreignErrors = Atomic(0)
  let cancellations = Atomic(0)
  let thrown = Atomic(0)
  private let lock = NSLock()
  private var pending: [String: Int] = [:]
  private var earlyReturns: [String: Int] = [:]

  func earlyReturn(_ kind: String) {
    lock.lock()
    earlyReturns[kind, default: 0] += 1
    lock.unlock()
  }

  var earlyReturnsByKind: [String: Int] {
    lock.lock()
    defer { lock.unlock() }
    return earlyReturns
  }

  func started(_ kind: EngineStress.Kind) {
    lock.lock()
    pending[kind.rawValue, default: 0] += 1
    lock.unlock()
  }

  func answered(_ kind: EngineStress.Kind) {
    lock.lock()
    pending[kind.rawValue, default: 0] -= 1
    lock.unlock()
  }

  var unanswered: [String: Int] {
    lock.lock()
    defer { lock.unlock() }
    return pending
  }
}

/// A small seeded generator, so that a failing run's seed can be replayed (the schedule still
/// varies with timing).
struct SplitMix64: RandomNumberGenerator {
  private var state: UInt64
  init(seed: UInt64) { state = seed }
  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }
}
