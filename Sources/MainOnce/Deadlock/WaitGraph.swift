/// The wait-for graph at one reading of the `WaitBoard`: every published wait, with the threads
/// that must make progress before it can end.
///
/// Only waits MainOnce performs are in it, and only blockers it knows for certain: a once-cell's
/// runner, the main queue's holder (from libdispatch's lock word, or, where that cannot be read,
/// a thread whose wait began while it held the main queue), a serial queue's owner, a thread a
/// waiter named, the performers of a unit of work, the holder of a link of a queue's target
/// chain, and the waiter itself where only it could run what would end its wait. `/proc` plays
/// no part.
struct WaitGraph {
  /// One thread's wait at this reading, as plain data: the detector keeps no wait object. In a
  /// deadlock, it is one line of the report: the wait and the threads that block it.
  struct Node {
    let thread: ThreadID
    /// The wait object's identity and its thread's publication count: the same wait, if both
    /// are the same at a later reading.
    let identity: ObjectIdentifier
    let publication: UInt
    /// Any one of these can end the wait; the waiter itself is among them only for a wait that
    /// only the waiter could end (``Blockers/itself(reason:)``), and then alone.
    let blockers: [ThreadID]
    let reason: String
    let epoch: UInt
    let slices: (started: UInt, lastTimedOut: UInt)
    let proof: WaitProof
    let holdsMainQueue: Bool
    /// Whether it waits for an initializer that waits for the main queue's holder.
    let waitsForMainQueueInitializer: Bool
    let call: String
    let waitsFor: String

    /// Whether only the waiting thread itself could end the wait.
    var waitsForItself: Bool { blockers == [thread] }
  }

  private(set) var nodes: [ThreadID: Node] = [:]

  init(nodes: [Node] = []) {
    for node in nodes { self.nodes[node.thread] = node }
  }

  /// Reads every published wait and asks each what it waits for.
  static func read() -> WaitGraph {
    WaitBoard.read { published in
      let waits = published.compactMap { entry -> (any BlockingWait, UInt)? in
        guard let wait = entry.wait as? any BlockingWait, !wait.isOver else { return nil }
        return (wait, entry.publication)
      }
      let holders: [ThreadID] =
        switch QueueOwnership.ownerOfMainQueue() {
        case .thread(let owner): [owner]
        case .nobody: []
        case .unknown: waits.filter { $0.0.holdsMainQueue }.map(\.0.thread)
        }
      let serving = Set(waits.filter { $0.0.servesMainQueue }.map(\.0.thread))
      var graph = WaitGraph()
      for (wait, publication) in waits {
        // Read before the blockers: a change after this reading shows as a new epoch.
        let epoch = wait.epoch
        let slices = wait.slices
        let waitsFor = wait.blockers()
        var (blockers, reason): ([ThreadID], String) =
          switch waitsFor {
          case .none: ([], "")
          case .thread(let thread, let why): ([thread], why)
          case .anyOf(let threads, let why): (threads, why)
          // A holder that serves the main queue runs what waits for it.
          case .mainQueue:
            (holders.filter { !serving.contains($0) }, ", which holds the main queue")
          case .itself(let why): ([wait.thread], why)
          }
        // A wait on its own thread is a blocker only where only that thread could end it: a
        // performer of the work it waits for, a once-cell runner's own wait, a `trackedSync`
        // whose queue libdispatch locked for it already are not.
        if case .itself = waitsFor {} else { blockers.removeAll { $0 == wait.thread } }
        guard !blockers.isEmpty, !wait.isOver else { continue }
        graph.nodes[wait.thread] = Node(
          thread: wait.thread, identity: ObjectIdentifier(wait), publication: publication,
          blockers: blockers, reason: reason, epoch: epoch, slices: slices, proof: wait.proof,
          holdsMainQueue: wait.holdsMainQueue || holders.contains(wait.thread),
          waitsForMainQueueInitializer: waitsFor == .mainQueue && wait.stallSubject != nil,
          call: wait.call, waitsFor: wait.waitsFor)
      }
      return graph
    }
  }

  /// The deadlock `thread` is in, if any: the waits of every thread that can never go on and
  /// that `thread`'s wait depends on, starting with its own. A thread can go on if any thread
  /// one of its blockers is can (a unit of work ends when any performer finishes it); what is
  /// left once no more threads can be struck off is deadlocked.
  func deadlock(through thread: ThreadID) -> [Node]? {
    var stuck = Set(nodes.keys)
    var changed = true
    while changed {
      changed = false
      for (id, node) in nodes
      where stuck.contains(id) && node.blockers.contains(where: { !stuck.contains($0) }) {
        stuck.remove(id)
        changed = true
      }
    }
    guard stuck.contains(thread) else { return nil }
    // Every stuck thread `thread` depends on, in the order a walk from it meets them.
    var waits: [Node] = []
    var seen: Set<ThreadID> = [thread]
    var pending = [thread]
    while !pending.isEmpty {
      let node = nodes[pending.removeFirst()]!
      waits.append(node)
      for next in node.blockers where seen.insert(next).inserted { pending.append(next) }
    }
    return waits
  }
}

/// A deadlock found at one reading, waiting for its evidence: the same waits, blocked the same
/// way, at a later reading, and every sliced wait through a slice that began after this one.
struct CandidateDeadlock {
  let edges: [WaitGraph.Node]

  /// Whether `later` shows the same deadlock: the same waits, each blocked the same way.
  func isSame(as later: [WaitGraph.Node]) -> Bool {
    later.count == edges.count
      && zip(edges, later).allSatisfy { before, after in
        before.thread == after.thread && before.identity == after.identity
          && before.publication == after.publication
          && before.epoch == after.epoch && before.blockers == after.blockers
      }
  }

  /// Whether `later` is the same deadlock, with the evidence in: every sliced wait has timed
  /// out a slice that began after this reading.
  func isProven(by later: [WaitGraph.Node]) -> Bool {
    isSame(as: later)
      && zip(edges, later).allSatisfy { before, after in
        before.proof != .slices
          || after.slices.lastTimedOut > before.slices.started
      }
  }

  /// The deadlock's waits, as the same deadlock seen from any of its threads names them.
  var signature: [UInt] {
    edges.map { [UInt(bitPattern: Int($0.thread.rawValue)), $0.publication] }
      .sorted { $0[0] < $1[0] }.flatMap { $0 }
  }

  /// Whether every wait of the deadlock can prove that it is blocked: none is a
  /// `withTrackedWait` or has a deadline.
  var canBeProven: Bool {
    edges.allSatisfy { $0.proof == .structural || $0.proof == .slices }
  }

  /// Whether a second reading at once can prove it: no wait of it is sliced.
  var needsNoSlice: Bool { edges.allSatisfy { $0.proof == .structural } }
}
