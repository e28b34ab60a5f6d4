/// The deadlock detector as the once-cells see it: four calls, made after the caller's own
/// lock is released, and two protocols. Nothing else of the detector is named outside
/// `Deadlock/`, and the detector's state has a lock of its own (``Detector/state``).
///
/// Lock order: the detector may take a subject's lock (to ask what is in its way) while it
/// holds its own; a subject never calls in here while it holds its lock.
enum DeadlockHooks {
  /// A caller that does not block (a task, a completion handler) now waits for `subject`: the
  /// watchdog watches it.
  static func callerWaits(in subject: some WaitSubject) {
    guard subject.isWatchedForStalls, DeadlockDetection.stallResponse != .off else { return }
    Detector.watch(subject)
  }

  /// `thread` is about to park until `ending` ends, waiting for `subject`. Records the wait (the
  /// watchdog finds the subject there), and checks whether the wait closes a cycle: then it stops the
  /// process, reports, or wakes a main-queue wait that serves initializers, as
  /// ``DeadlockDetection/cycleResponse`` says. Pass the result to ``didWake(_:from:)``.
  static func willBlock(
    _ thread: ThreadRecord, until ending: some WaitEnding, in subject: some WaitSubject
  ) -> RecordedWait? {
    defer { Instrumentation.noteParked() }
    guard DeadlockDetection.cycleResponse != .off || DeadlockDetection.stallResponse != .off
    else { return nil }
    let wait = RecordedWait(
      on: thread.id, object: .subject(subject, ending), operation: subject.label.operation,
      site: ending.site, siteIsCaller: subject.label.hasCallSites, holdsMainQueue: false,
      evidence: .resolution)
    Detector.begin(wait)
    return wait
  }

  /// `thread` woke from the wait ``willBlock(_:until:in:)`` recorded.
  static func didWake(_ thread: ThreadRecord, from wait: RecordedWait?) {
    Instrumentation.noteWoke()
    if let wait { Detector.end(wait) }
  }

  /// Callers may have stopped waiting for `subject`, or it finished: if the watchdog reported
  /// it, it says so.
  static func callersLeft(_ subject: some WaitSubject) {
    guard subject.isWatchedForStalls else { return }
    Detector.subjectChanged(subject)
  }
}

/// Something callers wait for: a main-queue flight, a `runOnce(for:)` cell, an
/// `AsyncMainLazy` build.
protocol WaitSubject: AnyObject, Sendable {
  /// Its name in reports.
  var label: CellLabel { get }
  /// Whether the watchdog watches it: work in main context does; `runOnce(for:)` bodies, which
  /// run on their callers' threads, do not.
  var isWatchedForStalls: Bool { get }
  /// What keeps its callers waiting now. Takes the subject's own lock.
  func obstacle() -> Obstacle
  /// Changes whenever ``obstacle()`` may have changed; read without the lock.
  var epochNow: UInt { get }
  /// Who waits for it and since when, for a stall report; `nil` once it has finished. Takes the
  /// subject's own lock.
  func stallSnapshot() -> StallSnapshot?
}

/// What keeps a subject's callers waiting.
enum Obstacle: Equatable {
  /// An initializer or body runs on this thread.
  case runner(ThreadID, since: UInt64)
  /// Nothing runs yet: its attempts wait for whoever holds the main queue.
  case mainQueue
  /// An `AsyncMainLazy` build runs on the main actor, and may be suspended.
  case builder(since: UInt64)
  /// Nothing: it has finished, or nobody waits.
  case nothing
}

/// The end of one caller's wait for a subject: set, under the subject's lock, before the caller
/// is woken.
protocol WaitEnding: AnyObject, Sendable {
  var hasEnded: Bool { get }
  /// Where the caller called.
  var site: CallSite { get }
}

/// A subject's waiting callers, as the watchdog reports them.
struct StallSnapshot {
  /// One waiting caller.
  struct Caller {
    enum Kind: String {
      case thread
      case task
      case handler = "completion handler"
    }
    let kind: Kind
    let thread: ThreadID?
    let site: CallSite
    let since: UInt64
  }

  let callers: [Caller]
  let obstacle: Obstacle
  /// What else the report should say about the subject.
  var notes: [String] = []
}
