import Foundation

/// One factor for every time bound in the tests and the fixtures that only guards against a
/// hang, or that gives MainOnce's watchdog time to act: `MAINONCE_TEST_TIME_SCALE`, a positive
/// decimal number, 1 when unset.
///
/// A verdict must not depend on how busy the machine is. Under a sanitizer, or beside other
/// jobs, everything takes longer, and a bound that is generous on a quiet machine is not. So
/// those bounds are written at their quiet-machine value and multiplied by this factor where
/// they are used: `.seconds(10).scaled`, `TimeScale.seconds(3)`. `.ci/run` raises it under the
/// sanitizers; raise it on a slow machine. Nothing that a test checks about MainOnce's own
/// timing (a stall timeout, "at least two timeouts") is scaled.
///
/// The test process passes the factor on to the fixture processes it starts.
public enum TimeScale {
  /// The name of the environment variable.
  public static let variable = "MAINONCE_TEST_TIME_SCALE"

  /// The factor: `MAINONCE_TEST_TIME_SCALE`, or 1. A value that is not a positive decimal
  /// number stops the process, rather than leave the bounds silently unscaled.
  ///
  /// Read with `getenv`, not `ProcessInfo`: Foundation's copy of the environment allocates (and
  /// frees) a string for every variable, which fills the allocator's per-thread cache for the
  /// sizes some fixtures rely on to get a freed object's address back.
  public static let factor: Double = {
    guard let value = getenv(variable) else { return 1 }
    let text = String(cString: value)
    guard let value = Double(text), value.isFinite, value > 0,
      text.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") })
    else {
      fatalError("\(variable)=\(text): the time scale must be a positive decimal number, such as 4")
    }
    return value
  }()

  /// `seconds` times the factor.
  public static func seconds(_ seconds: Double) -> Double { seconds * factor }

  /// `microseconds` times the factor, for `usleep`.
  public static func microseconds(_ microseconds: UInt32) -> UInt32 {
    UInt32(min(Double(microseconds) * factor, Double(UInt32.max)))
  }
}

extension Duration {
  /// This duration times ``TimeScale/factor``.
  public var scaled: Duration { self * TimeScale.factor }
}
