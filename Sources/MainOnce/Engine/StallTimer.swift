internal import Synchronization

// The engine's timer for callers that do not block (tasks, completion handlers): started by the
// first such caller of a gate or an `AsyncMainLazy` build, it keeps the subject's bookkeeping
// at each look (a gate whose token was freed lets go of the completion handlers nothing can
// answer any more) and tells the observer (`WaitObserver.swift`) about callers that outlived
// their grace period. It runs whether or not an observer is installed, and stops at the first look
// that finds no caller.

/// A subject whose callers that do not block the engine's timer watches: a main-queue gate,
/// an `AsyncMainLazy` build.
protocol TimedSubject: StallSubject {
  /// ``StallSubject/stallSnapshot()`` at a look of the subject's timer, where the subject keeps
  /// its bookkeeping. The timer stops at the first look that finds no caller.
  func timerLook() -> StallSnapshot?
}

extension TimedSubject {
  /// Starts the timer that watches the subject for its callers that do not block (tasks,
  /// completion handlers); the first such caller starts it. It looks at the subject
  /// (``timerLook()``) a grace period (`WaitBoard.gracePeriod`) later, then every
  /// `MainQueueEngine.timerInterval`, until a look finds no caller: at its first look that finds
  /// some, it tells the observer that they outlived their grace period, and at each later one it
  /// calls what the observer returned.
  func startStallTimer() {
    #if DEBUG || MAINONCE_INSTRUMENTATION
      EngineCounters.noteSubject(self)
    #endif
    timerFires(after: WaitBoard.gracePeriod, then: nil)
  }

  private func timerFires(after delay: UInt64, then look: (@Sendable () -> Void)?) {
    Platform.runOnOvercommitQueue(afterNanoseconds: delay) {
      guard self.timerLook().map({ !$0.callers.isEmpty }) == true else { return }
      if let look { look() }
      let next =
        look ?? MainQueueEngine.observer?.callersOutlivedGracePeriod(of: self) ?? { @Sendable in }
      self.timerFires(after: MainQueueEngine.timerInterval, then: next)
    }
  }
}

extension Gate: TimedSubject {
  /// The stall snapshot, at a look of the gate's timer, which also keeps the gate's
  /// bookkeeping: once its token is freed, it lets go of the completion-form waits nothing can
  /// answer any more (ending a stall reported about them), and once no caller is left it
  /// forgets its timer, which stops, so that the next caller that does not block starts one.
  func timerLook() -> StallSnapshot? {
    MainQueueEngine.transition { held -> (StallSnapshot?, Gate?, GateEffects<WaiterQueue>) in
      let effects = strandedWaits(holding: held)
      let seen = snapshot(holding: held)
      if seen?.callers.isEmpty ?? true {
        withStallTracking(holding: held) { stallTracking, _ in stallTracking.isTimed = false }
      }
      return (seen, self, effects)
    }
  }
}
