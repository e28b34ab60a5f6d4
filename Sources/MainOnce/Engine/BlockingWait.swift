// The read-only view of a wait that the engine offers whoever watches waits (the deadlock
// detector): what a blocked thread waits for (`BlockingWait`), and what the callers of an
// initializer wait for (`StallSubject`). The engine's own waits implement it
// (`Gate+Watching.swift`), and so do those of the rooms above it that publish waits on the
// `WaitBoard` (a `runOnce(for:)` caller, the tracked waits).

/// A wait as a watcher sees it: published by its thread on the `WaitBoard` while it blocks, and
/// read through ``blockers()``, its one query of the state behind the wait. Once-cell callers,
/// `runOnce(for:)` callers and the tracked waits implement it; the deadlock detector never
/// looks past this protocol.
protocol BlockingWait: AnyObject, Sendable {
  /// The waiting thread.
  var thread: ThreadID { get }
  /// How the wait shows that it is blocked.
  var proof: WaitProof { get }
  /// Whether the thread held the main queue when it began to wait (and so holds it throughout).
  var holdsMainQueue: Bool { get }
  /// Whether the wait runs the initializers queued for the main queue while it waits (the
  /// `service` policy): then it does not keep them waiting.
  var servesMainQueue: Bool { get }
  /// Whether the wait is known to be over, though its thread may not have withdrawn it yet.
  var isOver: Bool { get }
  /// What must make progress before the wait can end, now.
  func blockers() -> Blockers
  /// Changes whenever ``blockers()`` may have changed in a way a re-read cannot show (a
  /// once-cell's runner handing over).
  var epoch: UInt { get }
  /// For ``WaitProof/slices``: how many slices have started, and the number of the last one
  /// that timed out (0: none).
  var slices: (started: UInt, lastTimedOut: UInt) { get }
  /// Where the wait was called, and the call as reports name it.
  var site: CallSite { get }
  var call: String { get }
  /// What the wait is for, as the object of "waits for …".
  var waitsFor: String { get }
  /// What its callers wait for, watched for stalls; `nil` for waits that are not.
  var stallSubject: (any StallSubject)? { get }
  /// What a report naming the wait should add about what MainOnce could not read of its
  /// target, as a sentence; `nil` for none.
  var note: String? { get }
}

extension BlockingWait {
  var note: String? { nil }
}

/// How a wait shows that it is blocked, which decides whether a cycle through it can stop the
/// process.
enum WaitProof: Equatable {
  /// A once-cell caller, or `trackedSync` before its work starts: blocked until the state that
  /// ``BlockingWait/blockers()`` reads changes.
  case structural
  /// A semaphore or group wait, in slices: blocked across a slice that timed out.
  case slices
  /// `withTrackedWait`: MainOnce cannot see into it. A cycle through it is reported, never
  /// stopped.
  case opaque
  /// A wait with a deadline: it ends by itself. Reported, never stopped.
  case timed
  /// A semaphore or group wait for a target whose contract names no closed set of threads
  /// (`WaitTarget.openness`: a unit of work, a thread captured in dispatch work): a thread not
  /// in the graph may still end it. Reported, never stopped.
  case open(because: String)
}

/// Whom a wait waits for.
enum Blockers: Equatable {
  /// Nobody MainOnce knows of (the wait is over, or waits for something it cannot see).
  case none
  /// This thread: a once-cell's runner, a thread target, a serial queue's owner.
  case thread(ThreadID, reason: String)
  /// Whichever thread holds the main queue.
  case mainQueue
  /// Any one of these threads: the performers of a unit of work, the waiter left out.
  case anyOf([ThreadID], reason: String)
  /// The waiting thread itself: only it could run what would end the wait (a tracked wait for
  /// the main queue from main context, for a queue it runs, for itself), so the wait can never
  /// end. Every other kind of wait leaves the waiter out of its blockers.
  case itself(reason: String)
}

/// What callers wait for, as a stall report describes it: a main-queue gate or an
/// `AsyncMainLazy` build.
protocol StallSubject: AnyObject, Sendable {
  var label: CellLabel { get }
  /// Who waits and what is in the way; `nil` once it has finished.
  func stallSnapshot() -> StallSnapshot?
  /// Claims the subject's one stall report, about callers waiting since `waitingSince`: `true`
  /// for the first to ask, while the subject has not finished. The subject then tells the
  /// observer when that stall ends (``WaitObserver/reportedWaitEnded(_:finished:waitingSince:)``),
  /// once, before any of its callers goes on.
  func claimStallReport(waitingSince: UInt64) -> Bool
}

/// A subject's waiting callers, and what keeps them waiting.
struct StallSnapshot {
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
    /// Whether the caller brought an attempt; `false` for a wait that never initializes.
    var bringsAttempt = true
  }

  /// What keeps a subject's callers waiting.
  enum Obstacle: Equatable {
    /// An initializer runs on this thread, since then.
    case runner(ThreadID, since: UInt64)
    /// Nothing runs yet: its attempts wait for whoever holds the main queue.
    case mainQueue
    /// Nothing runs, and nothing is queued: every caller waits without an attempt.
    case noAttempt
    /// An `AsyncMainLazy` build runs on the main actor, and may be suspended.
    case builder(since: UInt64)
  }

  let callers: [Caller]
  let obstacle: Obstacle
  /// What else the report should say about the subject.
  var notes: [String] = []
}
