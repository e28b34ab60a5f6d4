import Foundation
import MainOnce

/// Times the fast path against the check a literal port of the Khan Academy helper makes first.
///
/// The fast path is timed inlined in a tight loop, as a caller compiles it: no call, and
/// iterations overlap in the pipeline. `MainOnceBenchmarks` times it through a call, next to
/// `dispatch_once_f`, which is the fair comparison.
enum FastPathTiming {
  struct Result {
    let onceOnMain: String
    let isMainThread: String
  }

  static let doneToken = MainOnceToken("timing")

  #if DEBUG
    static let buildNote = "; debug build, see swift run -c release MainOnceDemo"
  #else
    static let buildNote = ""
  #endif

  static func measure() -> Result {
    onceOnMain(token: doneToken) {}
    let calls = 20_000_000
    let once = nanoseconds(per: calls) {
      for _ in 0..<calls { onceOnMain(token: doneToken) {} }
    }
    let checks = 200_000
    var mainThreadCount = 0
    let isMainThread = nanoseconds(per: checks) {
      for _ in 0..<checks where Thread.isMainThread { mainThreadCount += 1 }
    }
    return Result(
      onceOnMain: once.formatted(.number.precision(.fractionLength(1))),
      isMainThread: isMainThread.formatted(.number.precision(.fractionLength(0))))
  }

  private static func nanoseconds(per count: Int, _ work: () -> Void) -> Double {
    let elapsed = ContinuousClock().measure(work)
    let total =
      Double(elapsed.components.seconds) * 1e9 + Double(elapsed.components.attoseconds) / 1e9
    return total / Double(count)
  }
}
