import Foundation
import MainOnce
import Synchronization

/// `MainOnceBenchmarks profile first-call DRIVER VARIANT [COUNT]` and
/// `MainOnceBenchmarks profile race DRIVER onceOnMain|khanPort [RACES]`: one variant alone
/// under one driver, after a warm-up, for tools that measure a whole process. Prints ns per
/// call (µs per race, median) on standard error.
///
/// What a first call adds to the bare hop, for example:
///
/// ```sh
/// B=Benchmarks/.build/release/MainOnceBenchmarks
/// perf stat -e context-switches,syscalls:sys_enter_futex $B profile first-call runLoop bareHop 2000
/// strace -f -c $B profile first-call dispatchMain onceOnMain 2000
/// valgrind --tool=callgrind --separate-threads=yes $B profile first-call mainQueueDriver onceOnMain 2000
/// ```
///
/// Run each twice, with COUNT and 2×COUNT, and divide the difference by COUNT: start-up and the
/// warm-up cancel out. (valgrind 3.19 cannot read the DWARF 5 line tables Swift 6.3 emits: give
/// it a copy stripped with `strip --strip-debug`; and it crashes after `dispatchMain()`.)
///
/// `MainOnceBenchmarks profile phases DRIVER first-call|race [COUNT]` splits the time instead:
/// for a first call, from the call to the moment its block (or initializer) starts on the main
/// queue, and from there to the return; for a race, from the release to the initializer's
/// start, and from there to each racer's return.
enum Profile {
  static func run(group: String, driver: String, variant: String, count: Int?) -> Never {
    switch group {
    case "first-call":
      guard let chosen = FirstCalls.variants.first(where: { $0.key == variant }) else { usage() }
      DriverProcess.serve(driver: driver) {
        FirstCalls.run(chosen, count: 100)
        let perCall = FirstCalls.run(chosen, count: count ?? 2_000)
        report("\(Report.format(perCall, decimals: 0)) ns a call")
      }
    case "race":
      guard let chosen = Races.candidates.first(where: { $0.name == variant }) else { usage() }
      DriverProcess.serve(driver: driver) {
        let pool = RacerPool(threads: Races.threads)
        for _ in 0..<5 { _ = pool.race(chosen.start()) }
        let times = (0..<(count ?? 200)).map { _ in pool.race(chosen.start()) }
        report("\(Report.format(Timing(times).median, decimals: 0)) µs a race")
      }
    case "phases" where variant == "first-call":
      DriverProcess.serve(driver: driver) { firstCallPhases(count: count ?? 2_000) }
    case "phases" where variant == "race":
      DriverProcess.serve(driver: driver) { racePhases(races: count ?? 200) }
    default:
      usage()
    }
  }

  private static func report(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
  }

  /// When the main queue started the block or initializer of the call being measured.
  private static let mainStart = Atomic<UInt64>(0)

  /// The bare hop and a first call, alternating in rounds: median ns from the call to the start
  /// on the main queue, and from there to the return.
  private static func firstCallPhases(count: Int) {
    let semaphore = DispatchSemaphore(value: 0)
    let bare: @Sendable (Int) -> Void = { _ in
      DispatchQueue.main.async {
        mainStart.store(now(), ordering: .relaxed)
        semaphore.signal()
      }
      semaphore.wait()
    }
    var there: [String: [Double]] = [:]
    var back: [String: [Double]] = [:]
    for round in 0..<6 {
      for name in round.isMultiple(of: 2)
        ? ["bare hop", "onceOnMain"] : ["onceOnMain", "bare hop"]
      {
        let tokens = FreshTokens(count)
        var call = bare
        if name == "onceOnMain" {
          call = { index in
            onceOnMain(token: tokens.base[index]) { mainStart.store(now(), ordering: .relaxed) }
          }
        }
        for index in 0..<count {
          let start = now()
          call(index)
          let end = now()
          // The first round warms up.
          guard round > 1 else { continue }
          let middle = mainStart.load(ordering: .relaxed)
          there[name, default: []].append(Double(middle - start))
          back[name, default: []].append(Double(end - middle))
        }
      }
    }
    report("\(driverLabel): ns per call, median of \(4 * count) calls each")
    for name in ["bare hop", "onceOnMain"] {
      let to = Timing(there[name]!).median
      let from = Timing(back[name]!).median
      report(
        "  \(name.padding(toLength: 11, withPad: " ", startingAt: 0)) call → main queue"
          + " \(Report.format(to, decimals: 0)),  main queue → return"
          + " \(Report.format(from, decimals: 0))")
    }
  }

  /// Races as `race` makes them: median µs from the release to the start of the work on the
  /// main queue (MainOnce's initializer; the Khan port's block), and from there to each return.
  private static func racePhases(races: Int) {
    let pool = RacerPool(threads: Races.threads)
    let candidates: [(String, @Sendable () -> @Sendable () -> Void)] = [
      (
        "onceOnMain",
        {
          let token = FreshTokens(1)
          return {
            onceOnMain(token: token.base[0]) { mainStart.store(now(), ordering: .relaxed) }
          }
        }
      ),
      (
        "khanPort",
        {
          let predicate = FreshPredicates(1)
          return {
            KhanPort.onceOnMainThread(predicate.base) { mainStart.store(now(), ordering: .relaxed) }
          }
        }
      ),
    ]
    var toMain: [String: [Double]] = [:]
    var calls: [String: [[Double]]] = [:]
    var returns: [String: [[Double]]] = [:]
    for race in 0..<(races + 5) {
      for (name, start) in race.isMultiple(of: 2) ? candidates : candidates.reversed() {
        _ = pool.race(start())
        guard race >= 5 else { continue }
        let (released, starts, ends) = pool.lastRace
        let main = mainStart.load(ordering: .relaxed)
        toMain[name, default: []].append(Double(main - released) / 1_000)
        calls[name, default: []].append(starts.map { (Double($0) - Double(released)) / 1_000 })
        returns[name, default: []].append(ends.map { (Double($0) - Double(released)) / 1_000 })
      }
    }
    report(
      "\(driverLabel): µs after the release, median of \(races) races: the racers' calls and"
        + " returns, in order, and the start of the work on the main queue")
    func nth(_ times: [[Double]]) -> String {
      (0..<Races.threads).map { index in
        Report.format(Timing(times.map { $0[index] }).median, decimals: 1)
      }.joined(separator: " ")
    }
    for (name, _) in candidates {
      report(
        "  \(name.padding(toLength: 11, withPad: " ", startingAt: 0)) calls \(nth(calls[name]!));"
          + " main \(Report.format(Timing(toMain[name]!).median, decimals: 1));"
          + " returns \(nth(returns[name]!))")
    }
  }

  private static var driverLabel: String {
    Report.driverName(CommandLine.arguments.dropFirst(3).first ?? "")
  }
}
