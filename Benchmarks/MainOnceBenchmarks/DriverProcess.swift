import CBenchmarkSupport
import Dispatch
import Foundation
import MainOnce

/// A measurement made while one run-loop driver serves the main queue, in a process of its own:
/// the driver owns the main thread, and a process has one main queue.
///
/// `MainOnceBenchmarks child first-call|race DRIVER [--quick]` is the child side (and
/// `child objects-memory dispatchMain FORM`, the per-object memory, which needs a per-object
/// table of its own): it starts the
/// measurement on a background thread, serves the main queue with `DRIVER` on the main thread,
/// prints the result as one line of JSON and exits. The parent starts one child per driver with
/// ``spawn(_:driver:quick:as:)``.
/// What a measurement returns. Its metatype crosses into a `@Sendable` closure, which Swift 6.2
/// and later check (`SendableMetatype`, new in 6.2); before 6.2 there is nothing to ask for.
#if compiler(>=6.2)
  typealias EncodableResult = Encodable & SendableMetatype
#else
  typealias EncodableResult = Encodable
#endif

enum DriverProcess {
  /// The drivers, in the order of the tables.
  static let drivers = ["dispatchMain", "runLoop", "mainQueueDriver"]

  /// Runs `measure` on a background thread while `driver` serves the main queue on the main
  /// thread (`mainQueueDriver`: a `poll` loop that drains it through ``MainQueueDriver``; the
  /// GLib loops of ``RunLoopServing``), and
  /// prints what it returns as JSON.
  static func serve<Result: EncodableResult>(
    driver: String, _ measure: @escaping @Sendable () -> Result
  ) -> Never {
    serve(driver: driver) {
      let encoder = JSONEncoder()
      encoder.nonConformingFloatEncodingStrategy = .convertToString(
        positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")
      print(String(decoding: try! encoder.encode(measure()), as: UTF8.self))
    }
  }

  /// Runs `body` on a background thread while `driver` serves the main queue, then exits.
  /// With `--one-cpu`, every thread of the process runs on the CPU the main thread is on.
  static func serve(driver: String, _ body: @escaping @Sendable () -> Void) -> Never {
    guard drivers.contains(driver) || RunLoopServing.servers.contains(driver) else {
      FileHandle.standardError.write(Data("unknown driver \(driver)\n".utf8))
      exit(64)
    }
    // Before any other thread exists: threads inherit the affinity of the thread that creates
    // them.
    if oneCPU && bench_stay_on_this_cpu() < 0 {
      FileHandle.standardError.write(Data("cannot bind to one CPU: errno \(errno)\n".utf8))
      exit(1)
    }
    // Asked for on the main thread, before the loop: the descriptor exists only while the main
    // queue is bound to the main thread.
    let descriptor = driver == "mainQueueDriver" ? MainQueueDriver.fileDescriptor : -1
    Thread {
      body()
      exit(0)
    }.start()
    switch driver {
    case "dispatchMain":
      dispatchMain()
    case "runLoop":
      RunLoop.main.run()
      fatalError("RunLoop.main.run() returned")
    case "glibDriver", "glibTickler":
      RunLoopServing.runGLib(driver)
    default:
      var events = [pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)]
      while true {
        _ = poll(&events, 1, -1)
        if events[0].revents & Int16(POLLIN) != 0 { MainQueueDriver.drain() }
      }
    }
  }

  /// Runs `group` under each of `drivers` in turn, a process each: the results of those that
  /// did not fail.
  static func spawnEach<Result: Decodable>(
    _ group: String, drivers: [String], quick: Bool, as type: Result.Type
  ) async -> [Result] {
    var results: [Result] = []
    for driver in drivers {
      if let result = await spawn(group, driver: driver, quick: quick, as: type) {
        results.append(result)
      }
    }
    return results
  }

  /// Runs `MainOnceBenchmarks child GROUP DRIVER [EXTRA…]` and decodes the JSON it printed.
  static func spawn<Result: Decodable>(
    _ group: String, driver: String, quick: Bool, as type: Result.Type, extra: [String] = []
  ) async -> Result? {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    process.arguments = ["child", group, driver] + extra + (quick ? ["--quick"] : [])
    let output = Pipe()
    process.standardOutput = output
    do {
      try process.run()
    } catch {
      print("cannot start the \(group) process for \(driver): \(error)")
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
      let result = try? JSONDecoder().decode(type, from: Data(line.utf8))
    else {
      print("the \(group) process for \(driver) failed (status \(process.terminationStatus))")
      return nil
    }
    return result
  }
}

/// Fresh tokens on the heap; the buffer outlives every call made with them.
final class FreshTokens: Sendable {
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
final class FreshPredicates: Sendable {
  // This is safe because only `dispatch_once_f` writes the predicates, and it synchronizes.
  nonisolated(unsafe) let base: UnsafeMutablePointer<Int>

  init(_ count: Int) {
    base = .allocate(capacity: count)
    base.initialize(repeating: 0, count: count)
  }

  deinit { base.deallocate() }
}
