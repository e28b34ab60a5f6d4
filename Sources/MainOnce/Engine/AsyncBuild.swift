// The state of an `AsyncMainLazy` while a build is in flight, and its lock: what the table of
// `AsyncBuildMachine.swift` decides is kept here, under `AsyncBuild.lock`, and performed by
// `AsyncMainLazy.swift`. A build is a stall subject of the engine's: the engine's timer watches
// its callers (`Gate+Watching.swift`), and the observer hears of the end of a stall it reported.

/// One build of an ``AsyncMainLazy``, and the callers waiting for it.
final class AsyncBuild: @unchecked Sendable {
  // This is safe because its one mutable field, `state`, is reachable only with the lock's
  // proof (``withState(holding:_:)``, a `Guarded`), and the others never change (`label`,
  // `slot`) or are `Sendable` (`marker`, `executor`).

  /// Guards every build and every lazy value's current build. One lock for all: it is taken only
  /// on the slow path, for a few instructions at a time, through ``withLock(_:)``.
  private static let lock = Lock(rank: .asyncBuild)

  /// What proves that the caller holds ``lock``: only ``withLock(_:)`` makes one, and its body
  /// only borrows it, so no code outside the lock's scope can have one.
  struct LockHeld: ~Copyable {
    fileprivate init() {}
  }

  /// Runs `body` holding the lock that guards every build.
  static func withLock<Result, Failure: Error>(
    _ body: (borrowing LockHeld) throws(Failure) -> Result
  ) throws(Failure) -> Result {
    try lock.withLock { () throws(Failure) -> Result in try body(LockHeld()) }
  }

  /// A lazy value's state machine (the table of `AsyncBuildMachine.swift`), and its build in
  /// gate, if any: reachable only with the lock's proof.
  final class Slot: @unchecked Sendable {
    // This is safe because its one field, `state`, is reachable only with the lock's proof
    // (``withState(holding:_:)``, a `Guarded`).

    struct State {
      var machine = AsyncBuildMachine<CallerQueue>()
      var build: AsyncBuild?
    }

    private var state = Guarded<State, LockHeld>(State())

    /// Reads or changes the slot's state, holding the lock.
    func withState<Result>(holding held: borrowing LockHeld, _ body: (inout State) -> Result)
      -> Result
    {
      state.modify(held, body)
    }
  }

  /// How a caller's wait ended.
  enum Outcome {
    case built
    case failed(any Error)
    case cancelled
  }

  /// Identifies one build; task-local inside it, and so in every task started inside it. Holds
  /// its build weakly: a `Task { }` started inside the build keeps the marker, and may outlive
  /// the build.
  final class Marker: @unchecked Sendable {
    // This is safe because `build` is written once, by the build's initializer, before the
    // marker is bound to any task, and only read afterwards.
    @TaskLocal static var current: Marker?
    weak var build: AsyncBuild?
  }

  /// The task executor a build prefers for its task: child tasks (`async let`, task groups)
  /// inherit the preference, a `Task { }` does not, and a `Task(executorPreference:)` or
  /// `withTaskExecutorPreference` names another executor. Its identity therefore says "part of
  /// this build that it waits for", without guessing from an executor other code may prefer
  /// too. Runs every job on the global concurrent executor, as a task without a preference runs.
  final class Executor: TaskExecutor {
    func enqueue(_ job: consuming ExecutorJob) {
      globalConcurrentExecutor.enqueue(job)
    }
  }

  /// A caller waiting for a build.
  final class Caller: QueueLinked, @unchecked Sendable {
    // This is safe because its mutable state is reachable only with the lock's proof: whether
    // it was cancelled before it arrived (`isCancelled`, a `Guarded`) and its continuation,
    // written once, under the lock, before the caller joins a machine, and read only by
    // ``resumeAnswered(with:)``, on the thread that took it out of the machine under the lock;
    // and for `link`, which only ``CallerQueue`` reads and writes: inside a lazy value's
    // machine, under the lock, or in the effects that took the caller out of it, which own it
    // until they resume it.

    let since = Platform.monotonicNanoseconds()
    /// Where the caller awaits, and whether it brought a build (`false`: a wait that never
    /// builds).
    let site: CallSite
    let bringsBuild: Bool
    /// The build the caller's task was started inside, if any.
    let insideBuild: AsyncBuild?
    /// Whether the caller's task prefers `insideBuild`'s executor, which only the build's task
    /// and the child tasks it must wait for do (see ``Executor``).
    let prefersBuildExecutor: Bool
    /// Whether the caller's task was cancelled before it arrived: its arrival answers it then.
    private var isCancelled = Guarded<Bool, LockHeld>(false)
    private var continuation: UnsafeContinuation<Outcome, Never>?
    /// The caller queued behind this one (see ``CallerQueue``).
    var link = QueueLink<Caller>()

    init(insideBuild: AsyncBuild?, site: CallSite, bringsBuild: Bool) {
      self.site = site
      self.bringsBuild = bringsBuild
      self.insideBuild = insideBuild
      prefersBuildExecutor =
        insideBuild.map { build in
          withUnsafeCurrentTask {
            $0?.unownedTaskExecutor == build.executor.asUnownedTaskExecutor()
          }
        } ?? false
    }

    /// Whether the caller is part of `build` that the build must wait for: the build's own task
    /// (whatever executor it prefers now), or a child task of it. Such a caller can never be
    /// answered.
    func awaitsItsOwnBuild(_ build: AsyncBuild, holding held: borrowing LockHeld) -> Bool {
      guard insideBuild === build else { return false }
      return prefersBuildExecutor || build.isCurrentTask(holding: held)
    }

    /// Whether the caller's task was started inside `build`, but is not known to be part of it:
    /// a `Task { }`, or a child task that prefers an executor of its own. Called under the lock.
    func wasStartedInside(_ build: AsyncBuild) -> Bool {
      insideBuild === build && !prefersBuildExecutor
    }

    /// Records that the caller's task was cancelled before it arrived, holding the lock.
    func noteCancelled(holding held: borrowing LockHeld) { isCancelled.modify(held) { $0 = true } }

    /// Records the caller's continuation, holding the lock, before it joins a machine; returns
    /// whether its task was cancelled before.
    func suspend(
      with continuation: UnsafeContinuation<Outcome, Never>, holding held: borrowing LockHeld
    ) -> Bool {
      self.continuation = continuation
      return isCancelled.read(held)
    }

    /// Resumes the caller with its answer: after the lock, on the thread that took it out of
    /// the machine under it. Nothing writes the continuation once the caller has joined.
    func resumeAnswered(with outcome: Outcome) { continuation?.resume(returning: outcome) }
  }

  /// The callers of a lazy value's builds, in arrival order: a list threaded through them, so
  /// that joining allocates nothing. Under ``lock``, inside the value's machine, or owned by the
  /// effects that answered them after it, until they are resumed.
  typealias CallerQueue = LinkedQueue<Caller>

  let label: CellLabel
  let marker = Marker()
  let executor = Executor()
  /// The lazy value's state, whose callers wait for this build until it is over.
  let slot: Slot

  /// What changes while the build is in flight.
  struct State {
    /// The build's own task while it runs. Compared with the current task only, while the build
    /// is not over: the task is alive until it ends the build.
    var task: UnsafeCurrentTask?
    /// When the build reached the main actor.
    var startedAt: UInt64 = 0
    /// Set once the build runs on the main actor; until then it waits for the main queue, or,
    /// while only waits that never build wait, for a caller that builds.
    var hasStarted = false
    var isOver = false
    /// When the oldest caller had begun to wait, once a stall report about the build was
    /// delivered.
    var reportedSince: UInt64?
    /// Set while a timer watches the build for its callers.
    var isTimed = false
  }

  private var state = Guarded<State, LockHeld>(State())

  /// Reads or changes the build's state, holding the lock.
  func withState<Result>(holding held: borrowing LockHeld, _ body: (inout State) -> Result)
    -> Result
  {
    state.modify(held, body)
  }

  init(label: CellLabel, slot: Slot) {
    self.label = label
    self.slot = slot
    marker.build = self
  }

  /// The callers waiting for this build: none once it is over.
  func callers(holding held: borrowing LockHeld) -> [Caller] {
    guard !state.read(held).isOver else { return [] }
    return slot.withState(holding: held) { Array($0.machine.callers) }
  }

  /// Records the calling task as the build's own task. Called first thing in that task.
  func noteBuildTask() {
    withUnsafeCurrentTask { task in Self.withLock { withState(holding: $0) { $0.task = task } } }
  }

  /// Whether the calling task is the build's own task.
  func isCurrentTask(holding held: borrowing LockHeld) -> Bool {
    guard let task = state.read(held).task else { return false }
    return withUnsafeCurrentTask { $0 == task }
  }

  /// Reports the end of a reported stall, once, when the build is over (`finished`) or nobody
  /// waits for it any more.
  func reportEndIfReported(finished: Bool) {
    let since = Self.withLock { held -> UInt64? in
      guard finished || callers(holding: held).isEmpty else { return nil }
      return withState(holding: held) { state in
        defer { state.reportedSince = nil }
        return state.reportedSince
      }
    }
    if let since {
      MainQueueEngine.observer?.reportedWaitEnded(self, finished: finished, waitingSince: since)
    }
  }
}

extension AsyncBuild: TimedSubject {
  func stallSnapshot() -> StallSnapshot? {
    Self.withLock { held in
      let state = state.read(held)
      guard !state.isOver else { return nil }
      let callers = callers(holding: held)
      var snapshot = StallSnapshot(
        callers: callers.map {
          .init(
            kind: .task, thread: nil, site: $0.site, since: $0.since, bringsAttempt: $0.bringsBuild)
        },
        obstacle: state.hasStarted
          ? .builder(since: state.startedAt)
          : slot.withState(holding: held) { $0.machine.isBuilding } ? .mainQueue : .noAttempt)
      let startedInside = callers.filter { $0.wasStartedInside(self) }.map { "\($0.site)" }
      if !startedInside.isEmpty {
        let one = startedInside.count == 1
        snapshot.notes.append(
          "the task\(one ? "" : "s") awaiting at \(startedInside.joined(separator: ", "))"
            + " \(one ? "was" : "were") started inside the build with Task { }, or as"
            + " \(one ? "a child task" : "child tasks") with an executor preference of"
            + " \(one ? "its" : "their") own (addTask(executorPreference:),"
            + " withTaskExecutorPreference): if the builder waits for \(one ? "it" : "one of them"),"
            + " it can never finish")
      }
      return snapshot
    }
  }

  func timerLook() -> StallSnapshot? { stallSnapshot() }

  func claimStallReport(waitingSince: UInt64) -> Bool {
    Self.withLock { held in
      withState(holding: held) { state in
        guard state.reportedSince == nil, !state.isOver else { return false }
        state.reportedSince = waitingSince
        return true
      }
    }
  }
}
