internal import Dispatch
internal import Synchronization
internal import _CMainOnceShims

/// Which thread owns a serial dispatch queue right now, read from the queue's lock word.
///
/// libdispatch keeps a serial queue's owner in the low 30 bits of its `dq_state` word: the
/// kernel tid of the thread draining it or running `sync` on it, or, for the main queue before
/// `dispatchMain()`, of the main thread it is bound to. `dispatch_assert_queue` decides "am I on
/// this queue?" from the same word. There is no public way to ask that question without
/// trapping, and `DispatchQueue.getSpecific` cannot see a main-queue block that has entered
/// another queue's `sync`, so MainOnce reads the word itself.
///
/// The main queue is reached by link-time reference (the C shim), so this works the same in
/// dynamic, `--static-swift-stdlib` and fully static binaries. Before the first read of the main
/// queue, MainOnce checks its layout by reading it only (`mainonce_main_queue_layout_check`), and
/// the first hop confirms what the lock word means: a block running on the main queue must read
/// its own thread as the owner. Other queues, which only the tracked waits read (`trackedSync`,
/// `WaitTarget.queue`), are checked at the first such read, by a self-test that creates private
/// queues and runs `dispatch_sync_f` on one (`mainonce_queue_layout_self_test`), and by checking
/// that the Dispatch overlay's `DispatchQueue` holds the queue libdispatch runs. If a check
/// fails, MainOnce says so once on standard error and falls back to public signals (see
/// ``MainContext``); `MAINONCE_QUEUE_INTROSPECTION=off` turns it off silently.
enum QueueOwnership {
  /// Who owns a queue.
  enum Owner: Equatable {
    /// The queue is locked by this thread.
    case thread(ThreadID)
    /// Nobody is running the queue.
    case nobody
    /// MainOnce cannot read the queue's state.
    case unknown
  }

  /// Whether the main queue's owner can be read in this process: decided at first use, by
  /// reading the main queue only, and turned off if the first hop disagrees. One relaxed load
  /// once decided (reading a lazy `static let` would call `swift_once` each time).
  @inline(__always)
  static var isAvailable: Bool { known(availability, else: decideAvailability) }

  @inline(never)
  private static func decideAvailability() -> Bool {
    let verdict = Verdict.decide(
      setting: Settings.introspection, checks: { mainonce_main_queue_layout_check() },
      losing: "which cannot see a sync nested in a main-queue block after dispatchMain()")
    return decided(verdict, in: availability)
  }

  /// Whether queues other than the main queue can be read: their owner, width and target.
  /// Decided at the first such read, by a self-test that creates private queues and syncs on
  /// one: only the tracked waits ask, never a once-cell's caller.
  static var queuesAreReadable: Bool {
    guard isAvailable else { return false }
    return known(queueAvailability, else: decideQueueAvailability)
  }

  /// Whether `state` says readable, once it is decided: one relaxed load; `decide` otherwise.
  @inline(__always)
  private static func known(_ state: borrowing Atomic<UInt8>, else decide: () -> Bool) -> Bool {
    let known = state.load(ordering: .relaxed)
    guard known != Availability.undecided.rawValue else { return decide() }
    return known != Availability.unavailable.rawValue
  }

  @inline(never)
  private static func decideQueueAvailability() -> Bool {
    let verdict = Verdict.decide(
      setting: Settings.introspection,
      checks: { wrapperHoldsQueue() ? mainonce_queue_layout_self_test() : wrapperCheckFailed },
      losing: "which cannot see who holds a queue that trackedSync waits for")
    return decided(verdict, in: queueAvailability)
  }

  /// What is known of a layout.
  enum Availability: UInt8 {
    case undecided
    /// Checked; for the main queue, not yet confirmed by a hop.
    case available
    case unavailable
    /// The main queue's owner read as the thread of a hop running on it.
    case confirmed
  }

  /// What is known of the main queue's layout, and of other queues'.
  static let availability = Atomic<UInt8>(Availability.undecided.rawValue)
  static let queueAvailability = Atomic<UInt8>(Availability.undecided.rawValue)

  /// Records `verdict` in `state` and warns, once, if it is a fallback; returns whether the
  /// layout can be read. Racing first uses decide alike, and only the first to record warns.
  private static func decided(_ verdict: Verdict, in state: borrowing Atomic<UInt8>) -> Bool {
    let value: Availability = verdict.isAvailable ? .available : .unavailable
    let (recorded, _) = state.compareExchange(
      expected: Availability.undecided.rawValue, desired: value.rawValue, ordering: .relaxed)
    if recorded, let warning = verdict.warning { DeadlockReport.warning(warning).deliver(at: nil) }
    return verdict.isAvailable
  }

  /// Confirms, from a hop (a block running on the main queue, on `thread`), that the main
  /// queue's lock word names the thread that runs it; turns introspection off with a warning
  /// if it does not. One relaxed load once confirmed.
  static func confirmOwnerOfMainQueue(is thread: ThreadID) {
    guard availability.load(ordering: .relaxed) == Availability.available.rawValue,
      let main = mainonce_main_queue()
    else { return }
    let owner = owner(at: main)
    let confirmed = owner == .thread(thread)
    let (recorded, _) = availability.compareExchange(
      expected: Availability.available.rawValue,
      desired: (confirmed ? Availability.confirmed : .unavailable).rawValue, ordering: .relaxed)
    guard recorded, !confirmed else { return }
    DeadlockReport.warning(
      Verdict.fallbackWarning(
        reason: "a block on the main queue, on \(thread), read the queue's owner as \(owner)",
        losing: "which cannot see a sync nested in a main-queue block after dispatchMain()")
    ).deliver(at: nil)
  }

  /// The check number for a Dispatch overlay whose `DispatchQueue` does not hold its queue where
  /// MainOnce reads it.
  static let wrapperCheckFailed: Int32 = 100

  /// Whether the main queue is still bound to the main thread, as it is until `dispatchMain()`.
  /// Without introspection, assumed to be: a stall report asks only about a main thread that is
  /// not parked in `dispatchMain()`.
  static var isMainQueueBoundToMainThread: Bool {
    isAvailable ? mainonce_main_queue_is_thread_bound() : true
  }

  /// Whether a program has drained the main queue through `MainQueueDriver`: then its loop
  /// serves the main queue, as a running `RunLoop.main` does. Set by the driver, asked by stall
  /// reports.
  static var isServedByDriver: Bool { driverDrains.load(ordering: .relaxed) > 0 }
  static let driverDrains = Atomic(0)

  /// The owner of the main queue.
  static func ownerOfMainQueue() -> Owner {
    guard isAvailable, let main = mainonce_main_queue() else { return .unknown }
    return owner(at: main)
  }

  /// The owner of `queue`, if it is a serial queue whose state MainOnce can read.
  static func owner(of queue: DispatchQueue) -> Owner {
    withExtendedLifetime(queue) {
      guard queuesAreReadable, let pointer = wrapped(queue), mainonce_queue_is_serial(pointer)
      else {
        return .unknown
      }
      return owner(at: pointer)
    }
  }

  /// Whether `queue` is the main queue. (`DispatchQueue.main` makes a new wrapper object on
  /// every access, so identity comparison does not work.)
  static func isMainQueue(_ queue: DispatchQueue) -> Bool {
    guard queuesAreReadable else { return queue.label == DispatchQueue.main.label }
    return withExtendedLifetime(queue) { wrapped(queue) == mainonce_main_queue() }
  }

  /// Whether `queue` is known to be concurrent (its width is more than one).
  static func isKnownConcurrent(_ queue: DispatchQueue) -> Bool {
    withExtendedLifetime(queue) {
      guard queuesAreReadable, let pointer = wrapped(queue) else { return false }
      return !mainonce_queue_is_serial(pointer)
    }
  }

  private static func owner(at queue: UnsafeRawPointer) -> Owner {
    let owner = mainonce_queue_owner(queue)
    return owner == 0 ? .nobody : .thread(ThreadID(rawValue: owner))
  }

  /// The C queue a Swift `DispatchQueue` wraps: the overlay's class stores it right after the
  /// object header. The caller keeps `queue` alive across the read and every use of the result.
  private static func wrapped(_ queue: DispatchQueue) -> UnsafeRawPointer? {
    UnsafeRawPointer(Unmanaged.passUnretained(queue).toOpaque())
      .load(fromByteOffset: 16, as: UnsafeRawPointer?.self)
  }

  /// Whether the overlay's wrappers hold the queues libdispatch runs: `DispatchQueue.main`'s
  /// holds the main queue, and a private queue's is the queue current inside its own `sync`.
  /// Compares pointers only, reading wrappers that are kept alive.
  private static func wrapperHoldsQueue() -> Bool {
    let main = DispatchQueue.main
    let queue = DispatchQueue(label: "mainonce.wrapper-self-test")
    return withExtendedLifetime((main, queue)) {
      guard wrapped(main) == mainonce_main_queue(), let pointer = wrapped(queue) else {
        return false
      }
      return queue.sync { mainonce_current_queue() == pointer }
    }
  }
}

extension QueueOwnership {
  /// Whether introspection is on, and what to say about it.
  struct Verdict: Equatable {
    let isAvailable: Bool
    /// A line for standard error when MainOnce falls back for a reason other than the setting.
    let warning: String?

    /// The verdict for a layout whose `checks` return 0 if they pass, -1 where MainOnce does
    /// not know it, or the number of the first that failed; `losing` says what the fallback
    /// cannot see.
    static func decide(setting: Bool?, checks: () -> Int32, losing: String) -> Verdict {
      if setting == false { return Verdict(isAvailable: false, warning: nil) }
      #if os(Linux)
        let failedCheck = checks()
        let reason: String
        if failedCheck == -1 {
          reason = "MainOnce knows libdispatch's queue layout only on 64-bit Linux"
        } else if failedCheck == wrapperCheckFailed {
          reason = "the Dispatch overlay's DispatchQueue does not hold its queue where expected"
        } else if failedCheck != 0 {
          reason = "this libdispatch failed check \(failedCheck) of MainOnce's layout self-test"
        } else {
          return Verdict(isAvailable: true, warning: nil)
        }
        return Verdict(
          isAvailable: false, warning: fallbackWarning(reason: reason, losing: losing))
      #else
        // On Apple platforms the main thread serves the main queue, and public signals are
        // exact.
        return Verdict(isAvailable: false, warning: nil)
      #endif
    }

    static func fallbackWarning(reason: String, losing: String) -> String {
      "MainOnce: queue introspection is off: \(reason). MainOnce falls back to public signals,"
        + " \(losing); set MAINONCE_QUEUE_INTROSPECTION=off to silence this."
    }
  }
}

extension QueueOwnership {
  /// Stops the process with a message if `queue.sync` from the calling thread would wait for the
  /// thread itself: some queue on `queue`'s target chain (`queue` itself, the queues it targets,
  /// up to a root queue) is a serial queue this thread holds. libdispatch would trap without a
  /// word. Does nothing where queue ownership cannot be read.
  /// Returns the owner of `queue` itself, as read on the way.
  @discardableResult
  static func stopIfSyncWouldWaitForItself(
    on queue: DispatchQueue, at site: CallSite, thread me: ThreadID
  ) -> Owner {
    guard queuesAreReadable else { return .unknown }
    return withExtendedLifetime(queue) { () -> Owner in
      guard let start = wrapped(queue) else { return .unknown }
      var first = Owner.unknown
      // The chain is short (a root queue ends it); the bound only guards against a cycle.
      var links = 0
      var current: UnsafeRawPointer? = start
      while let link = current, links < 64 {
        links += 1
        let isMain = link == mainonce_main_queue()
        if isMain || mainonce_queue_is_serial(link) {
          let owner = owner(at: link)
          if links == 1 { first = owner }
          if owner == .thread(me) { stop(syncOn: start, heldLinks: links, at: site, thread: me) }
        }
        current = mainonce_queue_target(link)
      }
      return first
    }
  }

  /// Stops with the message of ``stopIfSyncWouldWaitForItself(on:at:thread:)``: the first
  /// `count` queues of `start`'s target chain, the last of which `me` holds.
  private static func stop(
    syncOn start: UnsafeRawPointer, heldLinks count: Int, at site: CallSite, thread me: ThreadID
  ) -> Never {
    var names: [String] = []
    var current: UnsafeRawPointer? = start
    while let link = current, names.count < count {
      names.append(isMainQueue(at: link) ? "the main queue" : "queue \"\(label(at: link))\"")
      current = mainonce_queue_target(link)
    }
    let through =
      names.count == 1
      ? "" : ", which targets \(names.dropFirst().joined(separator: ", which targets "))"
    Diagnostics.fail(
      """
      MainOnce: DispatchQueue.trackedSync at \(site) on \(names[0])\(through) would wait \
      for this thread itself: \(me) holds \(names.last!) (it runs that queue's work), so the \
      sync could never start; libdispatch would stop the process without a message. Run \
      the work directly, or use async.
      """,
      at: site)
  }

  private static func isMainQueue(at queue: UnsafeRawPointer) -> Bool {
    queue == mainonce_main_queue()
  }

  private static func label(at queue: UnsafeRawPointer) -> String {
    mainonce_queue_label(queue).map { String(cString: $0) } ?? "?"
  }
}

extension QueueOwnership {
  /// A serial link of a queue's target chain that a thread holds now.
  struct HeldLink: Equatable {
    /// The link as reports name it: `the main queue`, `queue "db"`.
    let name: String
    let holder: ThreadID
    let isMainQueue: Bool
    /// Whether it is the queue the chain starts from.
    let isFirst: Bool
  }

  /// What the work of a queue waits for, as a walk of its target chain read it: every held
  /// serial link must be released before the queue's work can run.
  struct Chain: Equatable {
    /// The serial links held now, nearest first.
    var held: [HeldLink] = []
    /// Where the walk stopped before the chain's end, and why, as a sentence; `nil` if it read
    /// the whole chain.
    var stop: String?
  }

  /// Reads `queue`'s target chain: `queue` itself, the queue it targets, and so on, up to the
  /// main queue or a root queue. `nil` where queues cannot be read. For the detector's readings
  /// only, never on a call's path.
  ///
  /// It walks only through links whose target cannot change (``mainonce_queue_target_mutability``
  /// reads 0): an active queue made with its target, as every `DispatchQueue(label:…)` is, keeps
  /// that target, and keeps it alive, for as long as it lives, and `queue` itself is kept alive
  /// by the caller; so every link read is alive. A link that is inactive or retargetable, or a
  /// concurrent queue of the user's, ends the walk: its own owner is read, nothing past it.
  static func chain(of queue: DispatchQueue) -> Chain? {
    guard queuesAreReadable else { return nil }
    return withExtendedLifetime(queue) { () -> Chain? in
      guard let start = wrapped(queue) else { return nil }
      var chain = Chain()
      // This is safe because each link is `queue` itself, which the caller keeps alive, or the
      // fixed target of a link read before, which that link keeps alive.
      var current: UnsafeRawPointer? = start
      // The chain is short (a root queue ends it); the bound only guards against a cycle.
      var links = 0
      while let link = current, links < 64 {
        links += 1
        let isMain = isMainQueue(at: link)
        let name = isMain ? "the main queue" : "queue \"\(label(at: link))\""
        guard isMain || mainonce_queue_is_serial(link) else {
          // A root queue ends the chain: its target is fixed, and there is none.
          if mainonce_queue_target_mutability(link) == 0, mainonce_queue_target(link) == nil {
            break
          }
          chain.stop = "\(name) is concurrent: MainOnce reads no link past it"
          break
        }
        if case .thread(let holder) = owner(at: link) {
          chain.held.append(
            HeldLink(name: name, holder: holder, isMainQueue: isMain, isFirst: links == 1))
        }
        // Past the main queue, only root queues.
        if isMain { break }
        switch mainonce_queue_target_mutability(link) {
        case 0:
          current = mainonce_queue_target(link)
        case 1:
          chain.stop = "\(name) is inactive: its target may still change"
          current = nil
        default:
          chain.stop =
            "\(name) was made retargetable (by dispatch_queue_create): its target may change"
          current = nil
        }
      }
      return chain
    }
  }
}
