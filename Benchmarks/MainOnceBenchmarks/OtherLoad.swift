import Foundation

/// How much CPU time other processes took while a group was measured: the machine is shared,
/// and a busy machine slows every hop down alike, which dilutes the ratios of first calls and
/// races to their baselines (see the README's first-call table).
///
/// The machine's busy time from `/proc/stat`, less this process's and its children's (driver
/// processes are waited for before the end is read). `/proc/stat` counts in hundredths of a
/// second, so a group shorter than a second reads coarsely.
struct OtherLoad {
  private let busy: Double
  private let idle: Double
  private let ours: Double

  static func now() -> OtherLoad {
    var busy = 0.0
    var idle = 0.0
    if let stat = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
      let line = stat.split(separator: "\n").first(where: { $0.hasPrefix("cpu ") })
    {
      // user nice system idle iowait irq softirq steal …
      let fields = line.split(separator: " ").dropFirst().compactMap { Double($0) }
      for (index, value) in fields.prefix(8).enumerated() {
        if index == 3 || index == 4 { idle += value } else { busy += value }
      }
    }
    let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
    return OtherLoad(busy: busy / ticks, idle: idle / ticks, ours: ownCPUSeconds())
  }

  /// The share of all CPUs' time since `start` that other processes used, from 0 to 1; NaN
  /// for less than a CPU-second, which `/proc/stat` cannot resolve.
  func share(since start: OtherLoad) -> Double {
    let total = (busy - start.busy) + (idle - start.idle)
    guard total >= 1 else { return .nan }
    return max(0, (busy - start.busy) - (ours - start.ours)) / total
  }

  private static func ownCPUSeconds() -> Double {
    var seconds = 0.0
    for who in [RUSAGE_SELF, RUSAGE_CHILDREN] {
      var usage = rusage()
      getrusage(__rusage_who_t(who.rawValue), &usage)
      for time in [usage.ru_utime, usage.ru_stime] {
        seconds += Double(time.tv_sec) + Double(time.tv_usec) / 1_000_000
      }
    }
    return seconds
  }
}
