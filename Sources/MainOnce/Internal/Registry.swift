/// What MainOnce's slow paths share, under one lock: every ``Flight``'s variables, the wait-for
/// graph the deadlock detector reads, and the watchdog's state. One lock keeps the graph
/// consistent with the flights it describes; nothing here is touched on a fast path.
struct Registry {
  static let shared = Locked(Registry())

  /// The flights with callers queued in them, by identity: what the watchdog watches. A flight
  /// is here from its first queued caller until it has finished, or has nobody left.
  var activeFlights: [ObjectIdentifier: Flight] = [:]
  /// What each blocked thread waits for.
  var waits: [ThreadID: BlockedWait] = [:]
  /// Threads performing each unit of work a tracked wait can name.
  var performers: [WaitTarget.WorkID: [ThreadID: Int]] = [:]
  /// The watchdog thread's state.
  var watchdog = WatchdogState()
}

extension Registry {
  /// Queues `waiter` in `flight`, behind the callers already waiting. A caller that waits for
  /// an initializer in main context is watched (see ``Watchdog``).
  mutating func enqueue(_ waiter: Waiter, in flight: Flight) {
    waiter.flight = flight
    flight.queue.append(waiter)
    activeFlights[ObjectIdentifier(flight)] = flight
    if flight.policy != .callingThread && waiter.isWaiting
      && DeadlockDetection.stallResponse != .off
    {
      Watchdog.watch(&self)
    }
  }

  /// Takes `flight` out of the active flights once it has finished or has nobody left.
  mutating func retireIfIdle(_ flight: Flight) {
    if flight.outcome != nil || (flight.queue.isEmpty && flight.runner == nil) {
      activeFlights[ObjectIdentifier(flight)] = nil
    }
  }
}
