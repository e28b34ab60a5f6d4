import Foundation

/// `MainOnceBenchmarks profile first-call DRIVER VARIANT [COUNT]` and
/// `MainOnceBenchmarks profile race DRIVER onceOnMain|khanPort [RACES]`: one variant alone
/// under one driver, after a warm-up, for tools that measure a whole process. Prints ns per
/// call (µs per race, median) on standard error.
///
/// What a first call adds to the bare hop, for example:
///
/// ```sh
/// B=.build/release/MainOnceBenchmarks
/// strace -f -c -e trace=futex,write,read,poll $B profile first-call dispatchMain onceOnMain 2000
/// perf stat -e context-switches,cpu-migrations $B profile first-call runLoop bareHop 2000
/// valgrind --tool=callgrind --separate-threads=yes $B profile first-call mainQueueDriver onceOnMain 2000
/// ```
///
/// Run each twice, with COUNT and 2×COUNT, and divide the difference by COUNT: start-up and the
/// warm-up cancel out. (valgrind 3.19 cannot read the DWARF 5 line tables Swift 6.3 emits: give
/// it a copy stripped with `strip --strip-debug`.)
enum Profile {
  static func run(group: String, driver: String, variant: String, count: Int?) -> Never {
    switch group {
    case "first-call":
      guard let chosen = FirstCalls.variants.first(where: { $0.key == variant }) else { usage() }
      DriverProcess.serve(driver: driver) {
        FirstCalls.run(chosen, count: 100)
        let perCall = FirstCalls.run(chosen, count: count ?? 2_000)
        FileHandle.standardError.write(
          Data("\(Report.format(perCall, decimals: 0)) ns a call\n".utf8))
      }
    case "race":
      guard let chosen = Races.candidates.first(where: { $0.name == variant }) else { usage() }
      DriverProcess.serve(driver: driver) {
        let pool = RacerPool(threads: Races.threads)
        for _ in 0..<5 { _ = pool.race(chosen.start()) }
        let times = (0..<(count ?? 200)).map { _ in pool.race(chosen.start()) }
        let median = Timing(times).median
        FileHandle.standardError.write(
          Data("\(Report.format(median, decimals: 0)) µs a race\n".utf8))
      }
    default:
      usage()
    }
  }
}
