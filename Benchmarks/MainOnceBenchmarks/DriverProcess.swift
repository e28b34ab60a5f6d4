import Dispatch
import Foundation
@_spi(Instrumentation) import MainOnce
import Synchronization

/// `MainOnceBenchmarks first-call dispatchMain|runLoop|mainQueueDriver [--quick]`: the first
/// call of a fresh token from another thread, and threads racing on one, while the given driver
/// serves the main queue (`mainQueueDriver`: a `poll` loop on the main thread that drains it
/// through `MainQueueDriver`). Runs in a process of its own (the driver owns the main thread)
/// and prints one JSON object.
enum FirstCallProcess {
  struct Result: Codable {
    let driver: String
    let tokensPerRound: Int
    let rounds: Int
    /// Nanoseconds per call.
    let mainQueueSync: Timing
    /// `DispatchQueue.main.async` and a semaphore wait: a hop that can be withdrawn, as
    /// MainOnce's is.
    let asyncAndPark: Timing
    let onceOnMain: Timing
    let khanPort: Timing
    let race: Race
  }

  struct Race: Codable {
    let threads: Int
    let races: Int
    /// Work items submitted to the main queue per race, on average.
    let onceOnMainWorkItems: Double
    let khanPortWorkItems: Double
    /// Microseconds from releasing the threads to the last return.
    let onceOnMainWallTime: Timing
    let khanPortWallTime: Timing
  }

  static func run(driver: String, quick: Bool) -> Never {
    Thread {
      let result = measure(driver: driver, quick: quick)
      let encoder = JSONEncoder()
      encoder.nonConformingFloatEncodingStrategy = .convertToString(
        positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")
      print(String(decoding: try! encoder.encode(result), as: UTF8.self))
      exit(0)
    }.start()
    switch driver {
    case "dispatchMain":
      dispatchMain()
    case "runLoop":
      RunLoop.main.run()
      fatalError("RunLoop.main.run() returned")
    case "mainQueueDriver":
      var events = [pollfd(fd: MainQueueDriver.fileDescriptor, events: Int16(POLLIN), revents: 0)]
      while true {
        _ = poll(&events, 1, -1)
        if events[0].revents & Int16(POLLIN) != 0 { MainQueueDriver.drain() }
      }
    default:
      fatalError("unknown driver \(driver)")
    }
  }

  private static func measure(driver: String, quick: Bool) -> Result {
    let count = quick ? 200 : 2_000
    let rounds = quick ? 3 : 9
    var sync: [Double] = []
    var park: [Double] = []
    var once: [Double] = []
    var khan: [Double] = []
    let parking = DispatchSemaphore(value: 0)
    for round in 0..<rounds {
      // Rotate the order, so that no variant always runs first.
      for variant in (0..<4).map({ ($0 + round) % 4 }) {
        switch variant {
        case 0: sync.append(perCall(count) { _ in DispatchQueue.main.sync {} })
        case 3:
          park.append(
            perCall(count) { _ in
              DispatchQueue.main.async { parking.signal() }
              parking.wait()
            })
        case 1:
          let tokens = FreshTokens(count)
          once.append(perCall(count) { index in onceOnMain(token: tokens.base[index]) {} })
        default:
          let predicates = FreshPredicates(count)
          khan.append(
            perCall(count) { index in KhanPort.onceOnMainThread(predicates.base + index) {} })
        }
      }
    }
    return Result(
      driver: driver, tokensPerRound: count, rounds: rounds, mainQueueSync: Timing(sync),
      asyncAndPark: Timing(park), onceOnMain: Timing(once), khanPort: Timing(khan),
      race: race(races: quick ? 10 : 50))
  }

  private static func perCall(_ count: Int, _ call: (Int) -> Void) -> Double {
    let start = now()
    for index in 0..<count { call(index) }
    return Double(now() - start) / Double(count)
  }

  private static func race(races: Int) -> Race {
    let threads = 8
    var onceWall: [Double] = []
    var khanWall: [Double] = []
    var onceItems = 0
    var khanItems = 0
    for _ in 0..<races {
      let tokens = FreshTokens(1)
      let itemsBefore = Instrumentation.mainQueueWorkItems
      onceWall.append(wallTime(threads) { onceOnMain(token: tokens.base[0]) {} })
      onceItems += Instrumentation.mainQueueWorkItems - itemsBefore
      let predicate = FreshPredicates(1)
      let syncsBefore = KhanPort.mainQueueSyncs.load(ordering: .relaxed)
      khanWall.append(wallTime(threads) { KhanPort.onceOnMainThread(predicate.base) {} })
      khanItems += KhanPort.mainQueueSyncs.load(ordering: .relaxed) - syncsBefore
    }
    return Race(
      threads: threads, races: races,
      onceOnMainWorkItems: Double(onceItems) / Double(races),
      khanPortWorkItems: Double(khanItems) / Double(races),
      onceOnMainWallTime: Timing(onceWall), khanPortWallTime: Timing(khanWall))
  }

  /// Releases `threads` threads at once into `call`; microseconds until the last returns.
  private static func wallTime(_ threads: Int, _ call: @escaping @Sendable () -> Void) -> Double {
    let arrived = Atomic(0)
    let released = Atomic<UInt64>(0)
    let finished = DispatchGroup()
    let lastReturn = Mutex<UInt64>(0)
    for _ in 0..<threads {
      finished.enter()
      Thread {
        if arrived.add(1, ordering: .acquiringAndReleasing).newValue == threads {
          released.store(now(), ordering: .releasing)
        }
        while released.load(ordering: .acquiring) == 0 {}
        call()
        let end = now()
        lastReturn.withLock { $0 = max($0, end) }
        finished.leave()
      }.start()
    }
    finished.wait()
    return Double(lastReturn.withLock { $0 } - released.load(ordering: .acquiring)) / 1_000
  }
}

/// Fresh tokens on the heap; the buffer outlives every call made with them.
private final class FreshTokens: Sendable {
  // This is safe because the tokens are initialized before the buffer is shared and only read
  // through MainOnce afterwards.
  nonisolated(unsafe) let base: UnsafeMutablePointer<MainOnceToken>
  private let count: Int

  init(_ count: Int) {
    self.count = count
    base = .allocate(capacity: count)
    for index in 0..<count { (base + index).initialize(to: MainOnceToken()) }
  }

  deinit {
    base.deinitialize(count: count)
    base.deallocate()
  }
}

/// Fresh `dispatch_once` predicates for the Khan port.
private final class FreshPredicates: Sendable {
  // This is safe because only `dispatch_once_f` writes the predicates, and it synchronizes.
  nonisolated(unsafe) let base: UnsafeMutablePointer<Int>

  init(_ count: Int) {
    base = .allocate(capacity: count)
    base.initialize(repeating: 0, count: count)
  }

  deinit { base.deallocate() }
}

extension FirstCallProcess {
  /// Runs this benchmark as a child process for `driver` and decodes what it printed.
  static func spawn(driver: String, quick: Bool) async -> Result? {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    process.arguments = ["first-call", driver] + (quick ? ["--quick"] : [])
    let output = Pipe()
    process.standardOutput = output
    do {
      try process.run()
    } catch {
      print("cannot start the \(driver) process: \(error)")
      return nil
    }
    let data = await withCheckedContinuation { continuation in
      DispatchQueue.global().async {
        continuation.resume(returning: output.fileHandleForReading.readDataToEndOfFile())
      }
    }
    process.waitUntilExit()
    guard process.terminationStatus == 0,
      let line = String(decoding: data, as: UTF8.self).split(separator: "\n").last,
      let result = try? JSONDecoder().decode(Result.self, from: Data(line.utf8))
    else {
      print("the \(driver) process failed (status \(process.terminationStatus))")
      return nil
    }
    return result
  }
}
