// The detector's findings as reports: a deadlock, and a reported stall that ended. Stall reports
// are made in Stall.swift.
extension DeadlockReport {
  /// The report of a deadlock, one line per wait. `proven`: every wait on it showed that it is
  /// blocked, and the report stops the process unless `response` is `report` (under `service`,
  /// it says why serving cannot break it). Otherwise it runs through a wait MainOnce cannot see
  /// into, which may still end: a report, and waiting goes on.
  static func cycle(
    _ edges: [WaitGraph.Node], proven: Bool, response: DeadlockDetection.CyclePolicy
  ) -> DeadlockReport {
    var headline = "MainOnce: deadlock detected"
    if !proven {
      let unseen = edges.filter { $0.proof == .opaque || $0.proof == .timed }
      var why =
        unseen.isEmpty
        ? []
        : [
          "MainOnce cannot see into " + unseen.map(\.call).joined(separator: ", ")
            + ", which may still return"
        ]
      for case (let node, .open(let reason)) in edges.map({ ($0, $0.proof) }) {
        why.append("\(node.call) waits for \(node.waitsFor), which \(reason)")
      }
      headline = "MainOnce: possible deadlock, not stopped: " + why.joined(separator: "; ")
    }
    var lines = [headline]
    for wait in edges {
      let holder = wait.holdsMainQueue ? " (holds the main queue)" : ""
      let blockers = wait.blockers.map { "\($0.rawValue)" }.joined(separator: ", ")
      lines.append(
        "  \(wait.thread)\(holder) waits for \(wait.waitsFor) in \(wait.call);"
          + " blocked by thread\(wait.blockers.count == 1 ? "" : "s") \(blockers)\(wait.reason)")
    }
    if proven && response == .service {
      let why =
        edges.contains { $0.waitsForMainQueueInitializer }
        ? "the main-queue wait on it cannot be interrupted to run the initializer: once blocked,"
          + " only DispatchSemaphore.wait(for:) and DispatchGroup.wait(for:) serve initializers"
        : "no MainOnce initializer on it waits to run on the main queue"
      lines.append("  the service policy cannot break this cycle: \(why)")
    }
    let involvesMainQueue = edges.contains {
      $0.holdsMainQueue || $0.reason == ", which holds the main queue"
    }
    lines.append(
      edges.contains(where: \.waitsForItself)
        ? "hint: a thread waits for work that only it could run, and runs nothing while it waits:"
          + " run that work directly instead of waiting for it, or wait for a queue or thread that"
          + " is free to run it"
        : involvesMainQueue
          ? "hint: code that holds the main queue must not block on work that needs the main"
            + " queue. Use `await onceOnMain(token:)` or the completion form, which never block a"
            + " thread, or run the initializer before the main queue starts waiting."
          : "hint: each of these waits can end only after the next one has: none ever will. Don't"
            + " wait, inside once-only work, for work that waits for it.")
    return DeadlockReport(
      kind: .cycle, text: lines.joined(separator: "\n"),
      stopsProcess: proven && response != .report,
      threads: edges.flatMap { [$0.thread] + $0.blockers }.namedOnce)
  }

  /// The word that a subject reported as stalled no longer keeps anyone waiting.
  static func stallEnded(of label: CellLabel, finished: Bool, waitingSince: UInt64)
    -> DeadlockReport
  {
    let waited = formatDuration(Platform.monotonicNanoseconds() &- waitingSince)
    return DeadlockReport(
      kind: .stallEnded,
      text: finished
        ? "MainOnce: the \(label.work) of \(label) finished after \(waited); its callers go on"
        : "MainOnce: no caller waits for the \(label.work) of \(label) any more, after \(waited)",
      label: "\(label)")
  }
}

extension Sequence<ThreadID> {
  /// The kernel ids of the threads, each once, in the order they first appear: the threads a
  /// report names.
  var namedOnce: [Int32] {
    var named: [Int32] = []
    for thread in self where !named.contains(thread.rawValue) { named.append(thread.rawValue) }
    return named
  }
}
