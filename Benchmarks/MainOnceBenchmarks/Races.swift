import CBenchmarkSupport
import Dispatch
import Foundation
import MainOnce
import Synchronization

/// `MainOnceBenchmarks race`: eight threads racing on a fresh token, MainOnce against the Khan
/// port, under each driver (each in a process of its own, see ``DriverProcess``).
///
/// The method: eight threads are made ready, spinning on a flag; the time runs from
/// the moment the last of them sets it to the moment the last returns. The two candidates
/// alternate, race by race, and the verdict is the median of the per-race ratios. The threads
/// are the same in every race (a pool), so that no race pays for creating or ending threads.
enum Races {
  struct Result: Codable {
    let driver: String
    let threads: Int
    let races: Int
    /// Microseconds from the release to the last return, one sample per race.
    let onceOnMain: Timing
    let khanPort: Timing
    /// Main-queue work items per race, on average.
    let onceOnMainWorkItems: Double
    let khanPortWorkItems: Double
  }

  static let threads = 8

  /// The two candidates, by name.
  static let candidates: [(name: String, start: @Sendable () -> @Sendable () -> Void)] = [
    (
      "onceOnMain",
      {
        let token = FreshTokens(1)
        return { onceOnMain(token: token.base[0]) {} }
      }
    ),
    (
      "khanPort",
      {
        let predicate = FreshPredicates(1)
        return { KhanPort.onceOnMainThread(predicate.base) {} }
      }
    ),
  ]

  /// The child side: measures under the driver this process serves the main queue with.
  static func measure(driver: String, quick: Bool) -> Result {
    let races = quick ? 20 : 200
    let pool = RacerPool(threads: threads)
    let (once, khan) = (candidates[0].start, candidates[1].start)
    // Warm up: the pool's threads, their MainOnce records, the dispatch pool.
    for _ in 0..<5 {
      _ = pool.race(once())
      _ = pool.race(khan())
    }
    var onceTimes: [Double] = []
    var khanTimes: [Double] = []
    var onceItems = 0
    var khanItems = 0
    for race in 0..<races {
      let onceFirst = race.isMultiple(of: 2)
      for candidate in onceFirst ? [0, 1] : [1, 0] {
        if candidate == 0 {
          let before = bench_main_queue_work_items()
          onceTimes.append(pool.race(once()))
          onceItems += bench_main_queue_work_items() - before
        } else {
          let before = KhanPort.mainQueueSyncs.load(ordering: .relaxed)
          khanTimes.append(pool.race(khan()))
          khanItems += KhanPort.mainQueueSyncs.load(ordering: .relaxed) - before
        }
      }
    }
    return Result(
      driver: driver, threads: threads, races: races, onceOnMain: Timing(onceTimes),
      khanPort: Timing(khanTimes), onceOnMainWorkItems: Double(onceItems) / Double(races),
      khanPortWorkItems: Double(khanItems) / Double(races))
  }
}

/// Threads that race into a call together, again and again.
///
/// Between races each thread sleeps on a semaphore of its own. A race wakes them all; each
/// arrives and spins until the last to arrive releases them (it notes the time), then makes the
/// call and notes when it returned.
final class RacerPool: @unchecked Sendable {
  // This is safe because `call` is written only while every racer sleeps, before the
  // semaphores that wake them are signalled, and read by the racers after that; `finished` is
  // signalled after every racer's last access, before the next race writes again.
  private var call: (@Sendable () -> Void)?
  private let count: Int
  private let start: [DispatchSemaphore]
  private let finished = DispatchSemaphore(value: 0)
  private let arrived = Atomic(0)
  private let returned = Atomic(0)
  private let releasedAt = Atomic<UInt64>(0)
  private let lastReturn = Atomic<UInt64>(0)
  /// When each racer made its call, and when it returned, in the last race; each racer writes
  /// its own slots.
  private let callTimes: UnsafeMutableBufferPointer<UInt64>
  private let returnTimes: UnsafeMutableBufferPointer<UInt64>

  init(threads: Int) {
    count = threads
    start = (0..<threads).map { _ in DispatchSemaphore(value: 0) }
    callTimes = .allocate(capacity: threads)
    callTimes.initialize(repeating: 0)
    returnTimes = .allocate(capacity: threads)
    returnTimes.initialize(repeating: 0)
    for index in 0..<threads {
      Thread { [self] in
        while true {
          start[index].wait()
          runOnce(index)
        }
      }.start()
    }
  }

  /// The last race: when the racers were released, when each made its call, and when each
  /// returned, each in order.
  var lastRace: (released: UInt64, calls: [UInt64], returns: [UInt64]) {
    (releasedAt.load(ordering: .acquiring), callTimes.sorted(), returnTimes.sorted())
  }

  /// Races every thread into `call`; microseconds from the release to the last return.
  func race(_ call: @escaping @Sendable () -> Void) -> Double {
    self.call = call
    arrived.store(0, ordering: .relaxed)
    returned.store(0, ordering: .relaxed)
    releasedAt.store(0, ordering: .relaxed)
    lastReturn.store(0, ordering: .relaxed)
    for semaphore in start { semaphore.signal() }
    finished.wait()
    self.call = nil
    let released = releasedAt.load(ordering: .acquiring)
    return Double(lastReturn.load(ordering: .acquiring) - released) / 1_000
  }

  private func runOnce(_ index: Int) {
    let call = self.call!
    if arrived.add(1, ordering: .acquiringAndReleasing).newValue == count {
      releasedAt.store(now(), ordering: .releasing)
    }
    while releasedAt.load(ordering: .acquiring) == 0 {}
    callTimes[index] = now()
    call()
    let end = now()
    returnTimes[index] = end
    lastReturn.max(end, ordering: .relaxed)
    if returned.add(1, ordering: .acquiringAndReleasing).newValue == count { finished.signal() }
  }
}
