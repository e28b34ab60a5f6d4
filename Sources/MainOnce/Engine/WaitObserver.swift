internal import Dispatch

/// Whom the engine tells about its waits that last, and nothing else: a wait that outlived its
/// grace period, and the end of a wait whose stall was reported. The deadlock detector is the one
/// observer; the API installs it (`DetectorInstallation.swift`), and the engine knows it only
/// through this protocol. No call is made for a wait that ends within its grace period, nor on a
/// done cell's path.
///
/// An observer reads what it needs through the read-only views of `BlockingWait.swift` and the
/// `WaitBoard`; it never performs a transition of the engine's.
protocol WaitObserver {
  /// `wait`, blocked on the calling thread since `since`, has outlived its grace period. Called on
  /// that thread, which the observer keeps until `park` returns `true`: `park` waits until the
  /// deadline it is given, and says whether the wait has ended.
  static func waitOutlivedGracePeriod(
    _ wait: any BlockingWait, since: UInt64, park: (DispatchTime) -> Bool)

  /// The callers of `subject` that do not block (tasks, completion handlers) have waited a
  /// grace period. Called by the subject's timer, which then calls what this returns at each of its
  /// later looks (one at a time, every `MainQueueEngine.timerInterval`) while such callers
  /// wait.
  static func callersOutlivedGracePeriod(of subject: any StallSubject) -> @Sendable () -> Void

  /// The stall of `subject` that the observer reported (it claimed the report with
  /// ``StallSubject/claimStallReport(waitingSince:)``) has ended: the subject finished
  /// (`finished`), or no caller waits for it any more. Called once, before any of its callers
  /// goes on.
  static func reportedWaitEnded(_ subject: any StallSubject, finished: Bool, waitingSince: UInt64)
}
