internal import Synchronization

/// What the deadlock detector asks of each kind of once-cell, answered under the cell's own lock.

extension Flight: WaitSubject {
  var isWatchedForStalls: Bool { true }

  func obstacle() -> Obstacle {
    OnceCell.lock.withLock {
      if outcome != nil || queue.isEmpty && runner == nil { return .nothing }
      if let runner { return .runner(runner.thread, since: runner.since) }
      return .mainQueue
    }
  }

  var epochNow: UInt { epoch.load(ordering: .acquiring) }

  func stallSnapshot() -> StallSnapshot? {
    OnceCell.lock.withLock {
      guard outcome == nil else { return nil }
      let callers = queue.compactMap { waiter -> StallSnapshot.Caller? in
        switch waiter.kind {
        case .thread(_, let thread):
          .init(kind: .thread, thread: thread, site: waiter.site, since: waiter.since)
        case .task: .init(kind: .task, thread: nil, site: waiter.site, since: waiter.since)
        case .handler: .init(kind: .handler, thread: nil, site: waiter.site, since: waiter.since)
        case .inPlace: nil
        }
      }
      let obstacle: Obstacle =
        if let runner { .runner(runner.thread, since: runner.since) } else { .mainQueue }
      return StallSnapshot(callers: callers, obstacle: obstacle)
    }
  }
}

extension Waiter: WaitEnding {
  var hasEnded: Bool { isResolved.load(ordering: .acquiring) }
}

extension RunOnceCell: WaitSubject {
  var isWatchedForStalls: Bool { false }

  func obstacle() -> Obstacle {
    Self.lock.withLock { current.map { .runner($0.runner, since: $0.since) } ?? .nothing }
  }

  /// A run's epoch while one is in progress; a fresh or done cell has no runner to change.
  var epochNow: UInt { Self.lock.withLock { current?.epoch.load(ordering: .acquiring) ?? .max } }

  func stallSnapshot() -> StallSnapshot? { nil }
}

extension RunOnceCell.Waiter: WaitEnding {
  var hasEnded: Bool { isResolved.load(ordering: .acquiring) }
}

extension AsyncBuild: WaitSubject {
  var isWatchedForStalls: Bool { true }

  func obstacle() -> Obstacle {
    Self.lock.withLock { currentObstacle }
  }

  private var currentObstacle: Obstacle {
    isOver ? .nothing : hasStarted ? .builder(since: since) : .mainQueue
  }

  /// A build's obstacle changes twice: when it starts, and when it ends.
  var epochNow: UInt { Self.lock.withLock { isOver ? 2 : hasStarted ? 1 : 0 } }

  func stallSnapshot() -> StallSnapshot? {
    Self.lock.withLock {
      guard !isOver else { return nil }
      var snapshot = StallSnapshot(
        callers: callers.map {
          .init(kind: .task, thread: nil, site: label.attribution!, since: $0.since)
        },
        obstacle: currentObstacle)
      let startedInside = callers.filter { $0.wasStartedInside(self) }.count
      if startedInside > 0 {
        snapshot.notes.append(
          "\(startedInside) of these tasks \(startedInside == 1 ? "was" : "were") started inside"
            + " the build with Task { }: if the builder waits for one of them, it can never finish")
      }
      return snapshot
    }
  }
}
