internal import _CMainOnceShims

/// A check of a stalled subject: its callers, and what is in their way.
struct StallCheck {
  /// What keeps the subject's callers waiting.
  enum InTheWay {
    /// An initializer runs on this thread.
    case runner(ThreadID, since: UInt64)
    /// An `AsyncMainLazy` build runs on the main actor, and may be suspended.
    case builder(since: UInt64)
    /// Nothing runs yet: the hop waits for this thread, which holds the main queue.
    case mainQueue(ThreadID)
    /// Nothing runs yet, and no thread holds the main queue.
    case nobody
    /// Nothing runs, and nothing will: every caller waits without an initializer.
    case noInitializer
    /// Nothing runs yet, and the main queue's owner cannot be read.
    case unknown
    /// As `unknown`, but this thread held the main queue when it began the tracked wait it is
    /// in, which has not ended.
    case recordedHolder(ThreadID)

    /// The thread known to be in the way: the runner, or the main queue's holder.
    var thread: ThreadID? {
      switch self {
      case .runner(let thread, _), .mainQueue(let thread), .recordedHolder(let thread): thread
      case .builder, .nobody, .noInitializer, .unknown: nil
      }
    }
  }

  /// Callers that wait the same way at the same place, for the report.
  struct Callers: Equatable {
    let kind: String
    let call: String
    var threads: [ThreadID] = []
    var count = 0
  }

  let subject: any StallSubject
  let callers: [Callers]
  /// When the oldest caller started waiting, and when the look was taken: `since <= now`.
  let since: UInt64
  let now: UInt64
  let timeout: UInt64
  let inTheWay: InTheWay
  /// The tracked wait the thread in the way is blocked in, described, if it is in one.
  let trackedWait: String?
  /// Why MainOnce cannot prove a cycle through that wait, if it is open, timed or opaque.
  var unprovable: String? = nil
  /// What else to say about the subject.
  let notes: [String]
  /// Where a stop is attributed: the oldest caller's call.
  let site: CallSite?

  var label: CellLabel { subject.label }

  var callerCount: Int { callers.reduce(0) { $0 + $1.count } }

  /// Samples the thread in the way, outside the lock.
  func sample() -> ThreadSample {
    // Without introspection, the main thread is the one to look at.
    let thread = if case .unknown = inTheWay { ThreadID.mainThread } else { inTheWay.thread }
    guard let thread else { return ThreadSample(holder: nil, activity: .unknown, progress: nil) }
    return ThreadSample(
      holder: thread, activity: ThreadSampler.stableActivity(of: thread).activity,
      progress: ThreadSampler.progress(of: thread))
  }

  /// The report of `sample`. `isStuck`: the thread in the way has not run since the last look.
  func report(_ sample: ThreadSample, isStuck: Bool, stops: Bool, note: String? = nil)
    -> DeadlockReport
  {
    let waited = formatDuration(now &- since)
    var lines: [String]
    if callerCount == 1, let only = callers.first {
      let who = only.threads.first.map { "\($0)" } ?? "a \(only.kind)"
      lines = [
        "MainOnce: \(who) has waited \(waited) in \(only.call) for the \(label.work) of \(label)"
      ]
    } else {
      lines = [
        "MainOnce: \(callerCount) callers have waited up to \(waited) for the \(label.work) of \(label)"
      ]
      lines += callers.map { "  \(Self.describe($0))" }
    }
    let (explanation, hint) = explain(sample, isStuck: isStuck)
    lines += (explanation + notes + [note].compactMap { $0 }).map { "  " + $0 }
    lines.append("  the stall timeout is \(formatDuration(timeout))")
    lines.append("hint: " + hint)
    return DeadlockReport(
      kind: .stall, text: lines.joined(separator: "\n"), stopsProcess: stops && isStuck,
      // The blocked callers, then the thread in the way.
      threads: (callers.flatMap(\.threads) + [sample.holder].compactMap { $0 }).namedOnce,
      label: "\(label)")
  }

  private static func describe(_ callers: Callers) -> String {
    guard !callers.threads.isEmpty else {
      return "\(callers.count) \(callers.kind)\(callers.count == 1 ? "" : "s") in \(callers.call)"
    }
    let shown = callers.threads.prefix(4).map { "\($0.rawValue)" }.joined(separator: ", ")
    let more = callers.count > 4 ? " and \(callers.count - 4) more" : ""
    return "thread\(callers.count == 1 ? "" : "s") \(shown)\(more) in \(callers.call)"
  }

  /// What is in the way, and a hint.
  private func explain(_ sample: ThreadSample, isStuck: Bool) -> ([String], String) {
    let state = ThreadActivity(activity: sample.activity)
    let stuck = isStuck ? ["it has not run at all in the last \(formatDuration(timeout))"] : []
    let trackedWaitHint =
      "if it waits for one of these callers, make that wait a tracked wait, such as"
      + " DispatchSemaphore.wait(for:) or DispatchGroup.wait(for:), so that MainOnce can prove the"
      + " cycle; or don't block the main queue on work that needs it: use `await"
      + " onceOnMain(token:)` or the completion form, which never block"
    switch inTheWay {
    case .runner(let runner, let since):
      var lines = [
        // At least: an attempt that ran in place before anyone waited is timed from the first
        // arrival, which read no clock for it.
        "the \(label.work) has run on \(runner) for at least \(formatDuration(now &- since)); it is"
          + " \(state)"
      ]
      guard let trackedWait else {
        return (
          lines + stuck,
          state.isBlockedOnLock
            ? trackedWaitHint : "waiting goes on until the \(label.work) returns"
        )
      }
      lines.append("\(runner) waits for \(trackedWait)")
      return (
        lines + stuck + [unprovable].compactMap { $0 }, "waiting goes on until that wait ends"
      )
    case .builder(let since):
      let ran = formatDuration(now &- since)
      return (
        ["the builder has run on the main actor for \(ran); it may be suspended in an await"],
        "waiting goes on until the build ends"
      )
    case .mainQueue(let owner):
      return explainHolder(owner, state: state, stuck: stuck, hint: trackedWaitHint)
    case .nobody:
      return (
        [
          "no thread holds the main queue, yet the hop has not started: libdispatch may have no"
            + " free worker thread to run it"
        ], "check for threads blocked in large numbers"
      )
    case .noInitializer:
      return (
        [
          "no caller has brought the \(label.work): a wait() never runs it, and ends only once a"
            + " call that does has succeeded"
        ], "make sure something calls \(label.operation) for it"
      )
    case .recordedHolder(let holder):
      return (
        [
          "MainOnce cannot read which thread holds the main queue (queue introspection is off);"
            + " \(holder) held it when it began to wait for \(trackedWait ?? "something"), and"
            + " is \(state)"
        ] + stuck,
        "without queue introspection MainOnce cannot see who runs a queue, nor prove a cycle"
          + " through one: unset MAINONCE_QUEUE_INTROSPECTION; or don't block the main queue on"
          + " work that needs it: use `await onceOnMain(token:)` or the completion form, which"
          + " never block"
      )
    case .unknown:
      guard sample.activity == .suspended else {
        return explainHolder(ThreadID.mainThread, state: state, stuck: stuck, hint: trackedWaitHint)
      }
      return (
        [
          "dispatchMain() serves the main queue from worker threads, and MainOnce cannot read"
            + " which one holds it, or what that thread does (queue introspection is off)",
          "a caller that runs inside a queue.sync nested in a main-queue block holds the main"
            + " queue itself, and its hop can never start; so does main-queue code that waits"
            + " for one of these callers",
        ],
        "turn queue introspection on (unset MAINONCE_QUEUE_INTROSPECTION) to see which thread"
          + " holds the main queue; call MainOnce outside such a sync, or use the async or"
          + " completion form"
      )
    }
  }

  private func explainHolder(
    _ owner: ThreadID, state: ThreadActivity, stuck: [String], hint: String
  ) -> ([String], String) {
    let isMainThread = owner == ThreadID.mainThread
    let loop: MainLoop? =
      !isMainThread
      ? nil
      : MainRunLoop.isRunning ? .runLoop : QueueOwnership.isServedByDriver ? .driver : nil
    let name =
      !isMainThread
      ? "\(owner)"
      : loop.map { "\(owner) (the main thread, \($0.rawValue))" }
        ?? "\(owner) (the main thread)"
    // A tracked wait is watched already: a cycle through it that MainOnce can prove is
    // stopped, and one it cannot is said so.
    if let trackedWait {
      return (
        ["the main queue is held by \(name), which waits for \(trackedWait)"] + stuck
          + [unprovable].compactMap { $0 },
        "waiting goes on until that wait ends"
      )
    }
    let driverHint =
      "serve the main queue from that loop with MainQueueDriver: watch"
      + " MainQueueDriver.fileDescriptor and call MainQueueDriver.drain() when it is readable;"
      + " or run RunLoop.main.run() or dispatchMain() instead"
    if isMainThread && loop == nil && QueueOwnership.isMainQueueBoundToMainThread {
      if case .polling = state.activity {
        return (
          [
            "the main thread holds the main queue and is \(state) in an event loop of its own,"
              + " which does not serve the main queue"
          ], driverHint
        )
      }
      return (
        [
          "the main thread holds the main queue but is not serving it: it has not called"
            + " dispatchMain() and runs no RunLoop.main or MainQueueDriver loop; it is \(state)"
        ] + stuck,
        Self.serveMainQueueHint(inTestRunner: Platform.isTestRunner)
      )
    }
    switch state.activity {
    case .blockedOnLock:
      return (
        ["the main queue is held by \(name), which is \(state)"] + stuck,
        Platform.isSwiftTestingRunner ? Self.swiftTestingHint : hint
      )
    case .polling where loop == .driver:
      return (
        [
          "the main queue is held by \(name), which is \(state): its loop has not drained the"
            + " main queue's work for \(formatDuration(now &- since))"
        ],
        "drain whenever MainQueueDriver.fileDescriptor is readable: keep it in the set the loop"
          + " waits on, level-triggered, and call MainQueueDriver.drain() without reading it first"
      )
    case .polling:
      return (
        [
          "the main queue is held by \(name), which is \(state): it runs an event loop that does"
            + " not serve the main queue (a nested run loop in another mode, or a non-Dispatch"
            + " event loop)"
        ], driverHint
      )
    case .unknown:
      return (["the main queue is held by \(name), which is \(state)"] + stuck, hint)
    default:
      return (
        ["the main queue is held by \(name), which is \(state)"],
        "the hop runs when the main queue's current work returns"
      )
    }
  }
}

/// What serves the main queue on the main thread.
private enum MainLoop: String {
  case runLoop = "in RunLoop.main"
  case driver = "served by MainQueueDriver"
}

extension StallCheck {
  /// What to do about a main thread that does not serve the main queue. In a test the main
  /// thread is the test runner's: it serves the main queue while a test waits the test
  /// framework's way.
  static func serveMainQueueHint(inTestRunner: Bool) -> String {
    inTestRunner
      ? "in a test, wait the way the test framework serves the main queue: `await` in an async"
        + " test, or an XCTestExpectation with `wait(for:timeout:)` or `await fulfillment(of:)`,"
        + " rather than blocking the main thread (in a semaphore, say)"
      : "serve the main queue: if the main thread runs an event loop of its own, drain the main"
        + " queue from it with MainQueueDriver (watch MainQueueDriver.fileDescriptor, call"
        + " MainQueueDriver.drain() when it is readable); otherwise call dispatchMain() or"
        + " RunLoop.main.run() on the main thread"
  }

  /// What to do about main-actor code that blocks in a Swift Testing test. The runner serves the
  /// main queue with dispatchMain(): a `@MainActor` test holds it on a worker thread, and lets
  /// the hop run only once it returns or awaits.
  static let swiftTestingHint =
    "in a Swift Testing test, don't block the main actor on work that needs the main queue:"
    + " `await` it (an async API, `await onceOnMain(token:)`, a continuation) rather than wait"
    + " for it in a semaphore; or make that wait a tracked wait, such as"
    + " DispatchSemaphore.wait(for:), so that MainOnce can prove the cycle"
}

/// What a look read about the thread in a subject's way.
struct ThreadSample {
  let holder: ThreadID?
  let activity: ThreadActivity.Activity
  let progress: ThreadProgress?

  /// The thread in the way and how much it had run, where both are known: what the next look
  /// compares with.
  var baseline: StallBaseline? {
    guard let holder, let progress else { return nil }
    return StallBaseline(thread: holder, progress: progress)
  }
}

extension StallCheck {
  /// What a look at `subject`, whose callers are `snapshot`, needs to know, read now.
  init(
    at subject: any StallSubject, _ snapshot: StallSnapshot, now: UInt64, since: UInt64,
    timeout: UInt64
  ) {
    var callers: [StallCheck.Callers] = []
    var oldest: StallSnapshot.Caller?
    for caller in snapshot.callers {
      if oldest == nil || caller.since < oldest!.since { oldest = caller }
      // A wait passes its call site, a lazy value's `value` cannot.
      let at = subject.label.hasCallSites || !caller.bringsAttempt ? " at \(caller.site)" : ""
      let kind = caller.kind.rawValue
      let operation =
        caller.bringsAttempt ? "\(subject.label.operation)" : subject.label.waitOperation
      let call = "\(caller.kind == .task ? "await " : "")\(operation)\(at)"
      if let index = callers.firstIndex(where: { $0.kind == kind && $0.call == call }) {
        callers[index].count += 1
        if let thread = caller.thread { callers[index].threads.append(thread) }
      } else {
        callers.append(
          .init(kind: kind, call: call, threads: caller.thread.map { [$0] } ?? [], count: 1))
      }
    }
    // Each thread's wait as a report describes it, and whether it holds the main queue.
    let waits = WaitBoard.read { published in
      published.compactMap {
        entry -> (thread: ThreadID, holdsMainQueue: Bool, text: String, unprovable: String?)? in
        guard let wait = entry.wait as? any BlockingWait, !wait.isOver else { return nil }
        let note = wait.note.map { " (\($0))" } ?? ""
        return (
          wait.thread, wait.holdsMainQueue, "\(wait.waitsFor) in \(wait.call)\(note)",
          Self.unprovable(wait)
        )
      }
    }
    let inTheWay: StallCheck.InTheWay
    switch snapshot.obstacle {
    case .runner(let thread, let since): inTheWay = .runner(thread, since: since)
    case .builder(let since): inTheWay = .builder(since: since)
    case .noAttempt: inTheWay = .noInitializer
    case .mainQueue:
      switch QueueOwnership.ownerOfMainQueue() {
      case .thread(let owner): inTheWay = .mainQueue(owner)
      case .nobody: inTheWay = .nobody
      case .unknown:
        inTheWay = waits.first { $0.holdsMainQueue }.map { .recordedHolder($0.thread) } ?? .unknown
      }
    }
    let inTheWayWait = inTheWay.thread.flatMap { thread in waits.first { $0.thread == thread } }
    self.init(
      subject: subject, callers: callers, since: since, now: now, timeout: timeout,
      inTheWay: inTheWay, trackedWait: inTheWayWait?.text, unprovable: inTheWayWait?.unprovable,
      notes: snapshot.notes,
      site: subject.label.hasCallSites ? oldest?.site : subject.label.attribution)
  }

  /// Why MainOnce cannot prove a cycle through `wait`, as a line of a stall report; `nil` for a
  /// wait that can show it is blocked.
  private static func unprovable(_ wait: any BlockingWait) -> String? {
    let cannot = "MainOnce cannot prove a cycle through that wait"
    switch wait.proof {
    case .structural, .slices: return nil
    case .timed: return "\(cannot): it has a deadline, and ends by itself"
    case .opaque: return "\(cannot): it cannot see into \(wait.call), which may still return"
    case .open(let why): return "\(cannot): it waits for \(wait.waitsFor), which \(why)"
    }
  }
}

/// One watcher's looks at a subject whose callers wait: the first, once the oldest caller has
/// waited the stall timeout, reports the subject (if no other watcher has); the next ones, a
/// timeout apart, report it again only when the thread in the way has not run at all since the
/// look before, which stops the process under the stall response `abort`. The timeout is read at
/// every look, so a new one applies to waits in progress.
struct StallWatch {
  private var reportedAt: UInt64?
  private var baseline: StallBaseline?
  private var isOver = false

  /// Looks at `subject`, if a look is due: `waitingSince` is when the watcher's own wait began,
  /// which the subject's oldest caller did not begin after.
  mutating func look(
    at subject: any StallSubject, site: CallSite?, waitingSince: UInt64, now: UInt64
  ) {
    let settings = DeadlockDetection.Snapshot.current
    let timeout = settings.stallTimeoutNanoseconds
    // Cheap first: most looks are not due, and need no lock.
    guard settings.stallResponse != .off, !isOver,
      now &- (reportedAt ?? waitingSince) >= timeout
    else { return }
    guard let snapshot = subject.stallSnapshot(), let oldest = snapshot.callers.map(\.since).min()
    else { return }
    let since = min(oldest, now)
    guard now &- (reportedAt ?? since) >= timeout else { return }
    let check = StallCheck(at: subject, snapshot, now: now, since: since, timeout: timeout)
    let sample = check.sample()
    guard reportedAt != nil else {
      guard subject.claimStallReport(waitingSince: since) else { return isOver = true }
      self.reportedAt = now
      baseline = sample.baseline
      return check.report(sample, isStuck: false, stops: false).deliver(at: check.site ?? site)
    }
    let isStuck =
      sample.activity == .blockedOnLock && sample.baseline != nil && sample.baseline == baseline
    self.reportedAt = now
    baseline = sample.baseline
    // Where a thread is in the way but how much it ran cannot be read, abort cannot decide.
    let isUnreadable = sample.holder != nil && sample.progress == nil
    guard isStuck || (settings.stallResponse == .abort && isUnreadable) else { return }
    isOver = true
    let note =
      isStuck
      ? nil
      : "MainOnce cannot read /proc/self/task, so it cannot tell a stuck thread from a slow"
        + " one: it does not stop the process"
    check.report(
      sample, isStuck: isStuck, stops: settings.stallResponse == .abort && isStuck, note: note
    ).deliver(at: check.site ?? site, patience: settings.handlerPatience)
  }
}

/// A thread in a subject's way, and how much it had run: what the next look compares with.
struct StallBaseline: Equatable {
  let thread: ThreadID
  let progress: ThreadProgress
}
