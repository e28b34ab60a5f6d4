/// MainOnce's environment variables, read once at first use.
///
/// Every variable accepts the same spellings: `on`/`off` and their synonyms `true`/`false`,
/// `yes`/`no` and `1`/`0`, in any case, where a variable is a switch. A value MainOnce does not
/// understand is ignored with a warning on standard error that starts with `MainOnce:`, and
/// the default is kept: a typo never silently changes behaviour.
enum Settings {
  /// `MAINONCE_QUEUE_INTROSPECTION=on|off`: `nil` when unset or not understood.
  static let introspection: Bool? = read("MAINONCE_QUEUE_INTROSPECTION", expecting: "on or off") {
    switchValue($0)
  }

  /// `MAINONCE_PROC=on|off`: `off` makes MainOnce read nothing from `/proc`, as where it is not
  /// mounted or readable (for tests of that case).
  static let readsProc: Bool =
    read("MAINONCE_PROC", expecting: "on or off") { switchValue($0) } ?? true

  /// `MAINONCE_DEADLOCK=abort|report|service|off`: what to do with deadlocks, one of
  /// ``cyclePolicies``.
  static let cycles: String? = read(
    "MAINONCE_DEADLOCK", expecting: "abort, report, service or off"
  ) { word($0, among: cyclePolicies) }

  /// `MAINONCE_STALL=report|abort|off`: what to do with stalls, one of ``stallResponses``.
  static let stallResponse: String? = read(
    "MAINONCE_STALL", expecting: "report, abort or off"
  ) { word($0, among: stallResponses) }

  /// The raw values of `DeadlockDetection.CyclePolicy` and of its stall policy's `Response`: the
  /// deadlock detector reads the two settings above as those.
  static let cyclePolicies = ["abort", "report", "service", "off"]
  static let stallResponses = ["report", "abort", "off"]

  /// `MAINONCE_STALL_TIMEOUT=<seconds>`: the stall timeout.
  static let stallTimeout: Duration? = read(
    "MAINONCE_STALL_TIMEOUT", expecting: "a decimal number of seconds from 0.001 to 86400"
  ) { value in
    seconds(value).flatMap { validStallTimeouts.contains($0) ? $0 : nil }
  }

  /// The stall timeouts MainOnce accepts: from a millisecond (a shorter one would report every
  /// hop) to a day.
  static let validStallTimeouts: ClosedRange<Duration> = .milliseconds(1) ... .seconds(86_400)

  /// Reads `name`; warns and returns `nil` if `parse` does not understand its value.
  private static func read<Value>(
    _ name: String, expecting expected: String, _ parse: (String) -> Value?
  ) -> Value? {
    guard let value = Platform.environment(name) else { return nil }
    guard let parsed = parse(value) else {
      DeadlockReport.warning(
        "MainOnce: ignoring \(name)=\(value): use \(expected); keeping the default"
      ).deliver(at: nil)
      return nil
    }
    return parsed
  }

  /// The word of `words` that `value` spells, in any case, `off` also for any switch value
  /// meaning off; `nil` for anything else.
  static func word(_ value: String, among words: [String]) -> String? {
    switchValue(value) == false ? "off" : words.first { $0 == value.lowercased() }
  }

  /// `true` for on, `false` for off, `nil` for anything else.
  static func switchValue(_ value: String) -> Bool? {
    switch value.lowercased() {
    case "on", "true", "yes", "1": true
    case "off", "false", "no", "0": false
    default: nil
    }
  }

  /// A duration written as a plain decimal number of seconds (`2`, `0.25`, `.5`): no sign,
  /// exponent, hexadecimal or special value, so that `0x10` and `1e10` are refused rather than
  /// read as 16 s or 317 years.
  static func seconds(_ value: String) -> Duration? {
    let parts = value.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
    guard !value.isEmpty, value != ".", parts.count <= 2,
      parts.allSatisfy({ $0.allSatisfy { $0.isASCII && $0.isNumber } }),
      parts[0].count <= 9, parts.count == 1 || parts[1].count <= 9
    else { return nil }
    let whole = Int64(parts[0]) ?? 0
    let fraction = parts.count == 2 ? String(parts[1]) : ""
    let nanoseconds = Int64(fraction + String(repeating: "0", count: 9 - fraction.count)) ?? 0
    return .seconds(whole) + .nanoseconds(nanoseconds)
  }
}
