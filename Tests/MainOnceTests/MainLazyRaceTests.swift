import Dispatch
import Foundation
import MainOnceFixtureSupport
import Synchronization
import Testing

@testable import MainOnce

/// A build's error: which attempt threw.
private struct RaceBuildFailed: Error, Equatable {
  let attempt: Int
}

/// What a build returns: which attempt built it. Its deinit is counted, so that the test sees
/// each built value destroyed once, when its lazy value ends.
private final class RaceBuilt: Sendable {
  let attempt: Int
  let destroyed: Counter

  init(attempt: Int, destroyed: Counter) {
    self.attempt = attempt
    self.destroyed = destroyed
  }

  deinit { destroyed.increment() }
}

private final class Counter: Sendable {
  private let count = Atomic(0)
  @discardableResult func increment() -> Int { count.add(1, ordering: .relaxed).newValue }
  var value: Int { count.load(ordering: .relaxed) }
}

/// An object the builder captures, watched without being kept alive.
private final class RaceCaptured: Sendable {}

/// Whether an object is still alive, without keeping it alive. (A `weak let` would need a
/// newer compiler than the oldest that builds MainOnce.)
private final class RaceWatch {
  weak var object: AnyObject?
  init(_ object: AnyObject) { self.object = object }
  var isAlive: Bool { object != nil }
}

/// What the builds of one lazy value saw.
private final class BuildLog: Sendable {
  let attempts = Counter()
  let overlaps = Counter()
  let outsideMainContext = Counter()
  let building = Atomic(false)
}

/// A lazy value's room, used again for every round: each round's `MainLazy` is made at the
/// address where the previous round's ended, so that the engine sees a fresh cell at a word it
/// has served before (and whatever it kept of that word must not answer the new one).
private struct Room: @unchecked Sendable {
  // This is safe because the room is initialized before the round's readers start and
  // deinitialized after every one of them returned (the test waits for them, bounded).
  let lazy: UnsafeMutablePointer<MainLazy<RaceBuilt, RaceBuildFailed>>
}

/// One reader's outcome: the value it read (its identity and the attempt that built it) or the
/// error it was handed.
private typealias Read = Result<(ObjectIdentifier, Int), RaceBuildFailed>

@Suite("MainLazy under races", .testProcessSettings)
struct MainLazyRaceTests {
  /// Readers on threads of their own, besides the main actor's and an async reader's.
  static let threads = 4
  static let rounds = 300

  @Test(
    "first reads race from threads, the main actor and tasks; builders throw; each value is built once at an address used again"
  )
  @MainActor
  func racingFirstReads() async {
    // Freed at the end; left allocated if a round's readers do not all return.
    let room = Room(lazy: .allocate(capacity: 1))
    let destroyed = Counter()
    for round in 0..<Self.rounds {
      let failures = round % 3
      let log = BuildLog()
      var captured: RaceCaptured? = RaceCaptured()
      let watch = RaceWatch(captured!)
      room.lazy.initialize(
        to: MainLazy { [captured] () throws(RaceBuildFailed) -> RaceBuilt in
          let attempt = log.attempts.increment()
          if log.building.exchange(true, ordering: .acquiring) { log.overlaps.increment() }
          defer { log.building.store(false, ordering: .releasing) }
          if DispatchQueue.getSpecific(key: mainQueueKey) != true {
            log.outsideMainContext.increment()
          }
          withExtendedLifetime(captured) {}
          if attempt <= failures { throw RaceBuildFailed(attempt: attempt) }
          return RaceBuilt(attempt: attempt, destroyed: destroyed)
        })
      captured = nil

      let reads = Recorder<Read>()
      let finished = DispatchGroup()
      let gate = StartGate(parties: Self.threads + 1)
      for _ in 0..<Self.threads {
        finished.enter()
        Thread {
          gate.arriveAndWait()
          reads.record(Self.read(room))
          finished.leave()
        }.start()
      }
      // An async reader off the main actor: it waits without blocking (`get()`), with its build
      // queued.
      finished.enter()
      Task.detached {
        do throws(RaceBuildFailed) {
          let built = try await room.lazy.pointee.get()
          reads.record(.success((ObjectIdentifier(built), built.attempt)))
        } catch {
          reads.record(.failure(error))
        }
        finished.leave()
      }
      gate.arriveAndWait()
      // The main actor's read builds in place, or joins a build a thread started: first, or
      // after the threads queued theirs, as the round decides.
      if round % 2 == 1 { usleep(UInt32(round % 7) * 50) }
      reads.record(Self.read(room))

      let allReturned =
        await onThread(timeout: .seconds(30)) {
          finished.wait(timeout: .now() + TimeScale.seconds(20)) == .success
        } ?? false
      guard allReturned else {
        Issue.record("round \(round): the readers did not all return")
        return  // The room is left allocated as it is: a reader may still use it.
      }

      let outcomes = reads.recorded
      let values = outcomes.compactMap { try? $0.get() }
      let errors = outcomes.compactMap { outcome -> Int? in
        if case .failure(let error) = outcome { error.attempt } else { nil }
      }
      let readers = Self.threads + 2
      #expect(outcomes.count == readers, "round \(round)")
      // Each failed build's error went to the one reader whose build it was.
      #expect(errors.sorted() == (0..<failures).map { $0 + 1 }, "round \(round)")
      #expect(values.count == readers - failures, "round \(round)")
      #expect(Set(values.map(\.0)).count == 1, "round \(round): readers saw different values")
      #expect(values.allSatisfy { $0.1 == failures + 1 }, "round \(round)")
      #expect(log.attempts.value == failures + 1, "round \(round): a build ran after a success")
      #expect(log.overlaps.value == 0, "round \(round): two builds ran at once")
      #expect(log.outsideMainContext.value == 0, "round \(round): a build ran outside main context")
      #expect(!watch.isAlive, "round \(round): the builder's capture outlived a successful build")

      // Ends here, in main context: the value is destroyed at once.
      room.lazy.deinitialize(count: 1)
      #expect(destroyed.value == round + 1, "round \(round): the value was not destroyed once")
    }
    room.lazy.deallocate()
  }

  /// A blocking read of the room's value.
  private static func read(_ room: Room) -> Read {
    Result { () throws(RaceBuildFailed) in try room.lazy.pointee.value }
      .map { (ObjectIdentifier($0), $0.attempt) }
  }
}
