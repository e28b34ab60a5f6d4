// Reporting: what MainOnce says. This room owns the one type every finding and warning of
// MainOnce's takes on its way to the report handler or to standard error, and how reports write
// a duration (this file); the crash messages for misuse (`Diagnostics.swift`); and the names
// those use for a call site (`CallSite.swift`) and for a cell (`CellLabel.swift`). It calls no
// other room: every room may say something. Where a report goes (the handler, standard error, a
// stop) is `Platform/ReportDelivery.swift`'s; the deadlock detector makes the findings
// (`Deadlock/DeadlockReport+Findings.swift`); settings, queue introspection and
// `MainQueueDriver` make warnings.

/// A finding of MainOnce's deadlock detector, or a warning of MainOnce's, as delivered to a
/// report handler or to standard error.
///
/// Every report's ``text`` starts with `MainOnce:`. A cycle report lists one line per edge of
/// the wait-for graph, in the shape of PostgreSQL's deadlock report ("thread A waits for X;
/// blocked by thread B"), then a hint. The other fields carry the same facts as data, for a
/// logger's metadata: ``kind``, ``callSite``, ``threads``, ``label`` and ``stopsProcess``.
///
/// A handler can be tested with a report made by hand:
///
/// ```swift
/// let report = DeadlockReport(
///   kind: .stall, text: "MainOnce: thread 42 has waited 1.0 s in onceOnMain(token:)",
///   callSite: .init(fileID: "App/Setup.swift", line: 12), threads: [42], label: "audio")
/// let handler = try #require(DeadlockDetection.reportHandler)
/// handler(report)
/// ```
///
/// The article <doc:FindingDeadlocks> shows a handler that routes reports to swift-log.
public struct DeadlockReport: Sendable, CustomStringConvertible {
  /// What kind of finding a report is.
  ///
  /// A struct with static members, not an enum, so that later versions can add kinds without
  /// breaking a `switch`: compare with `==`, or switch with a `default:` case.
  public struct Kind: Sendable, Hashable, CustomStringConvertible {
    private let name: String

    private init(_ name: String) { self.name = name }

    /// A wait would close a cycle in the wait-for graph: it can never end (or, through a wait
    /// MainOnce cannot see into, may never end).
    public static let cycle = Kind("cycle")
    /// A wait for the main queue has not made progress within the stall timeout. The report
    /// describes what the thread in the way is doing; the wait may still end.
    public static let stall = Kind("stall")
    /// A wait reported as a stall has ended after all.
    public static let stallEnded = Kind("stallEnded")
    /// Something MainOnce cannot do as configured: a setting it ignores (an environment
    /// variable it does not understand), or a facility it cannot use in this process (queue
    /// introspection, ``MainQueueDriver``'s descriptor). Never stops the process.
    public static let warning = Kind("warning")

    /// The kind's name: `cycle`, `stall`, `stallEnded` or `warning`.
    public var description: String { name }
  }

  /// A place in the source code: a `#fileID` and a line.
  public struct SourceLocation: Sendable, Hashable, CustomStringConvertible {
    /// The file, as `#fileID` spells it: `Module/File.swift`.
    public var fileID: String
    /// The line in the file.
    public var line: UInt

    /// Creates a location.
    public init(fileID: String, line: UInt) {
      self.fileID = fileID
      self.line = line
    }

    /// `fileID:line`.
    public var description: String { "\(fileID):\(line)" }
  }

  /// What kind of finding this is.
  public var kind: Kind

  /// Whether MainOnce stops the process after delivering this report.
  public var stopsProcess: Bool

  /// The report, one or more lines, starting with `MainOnce:`.
  public var text: String

  /// The call that waits, or the setting's call, where the report is about one: for a cycle,
  /// the wait that found it; for a stall, its first caller's call; `nil` for a stall's end and
  /// for most warnings.
  public var callSite: SourceLocation?

  /// The kernel thread ids (`gettid()`, the names in `/proc/self/task`) of the threads the
  /// report is about, without repeats: for a cycle, every thread on it; for a stall, the blocked
  /// callers (a suspended task or a completion handler has none) and then the thread in the way,
  /// if known. Empty for other reports.
  public var threads: [Int32]

  /// The label of the once-cell the report is about, as its text names it: a token's name, or
  /// a lazy value's type and declaration (`MainLazy<Stack> declared at App/Stack.swift:12`).
  /// `nil` for a cycle, which may run through several (its text names each), and for warnings.
  public var label: String?

  /// Creates a report, to test a report handler with.
  ///
  /// - Parameters:
  ///   - kind: What kind of finding it is.
  ///   - text: The report; MainOnce's own start with `MainOnce:`.
  ///   - stopsProcess: Whether the process stops after the handler returns.
  ///   - callSite: The call that waits, if the report is about one.
  ///   - threads: The kernel thread ids of the threads involved.
  ///   - label: The label of the once-cell the report is about.
  public init(
    kind: Kind, text: String, stopsProcess: Bool = false, callSite: SourceLocation? = nil,
    threads: [Int32] = [], label: String? = nil
  ) {
    self.kind = kind
    self.text = text
    self.stopsProcess = stopsProcess
    self.callSite = callSite
    self.threads = threads
    self.label = label
  }

  /// The report's ``text``.
  public var description: String { text }
}

extension DeadlockReport {
  /// A warning: something MainOnce cannot do as configured. `text` starts with `MainOnce:`.
  static func warning(_ text: String) -> DeadlockReport {
    DeadlockReport(kind: .warning, text: text)
  }
}

/// A duration for a report: milliseconds below a second, else seconds to a tenth.
func formatDuration(_ nanoseconds: UInt64) -> String {
  if nanoseconds < 1_000_000_000 { return "\(nanoseconds / 1_000_000) ms" }
  let tenths = (nanoseconds + 50_000_000) / 100_000_000
  return "\(tenths / 10).\(tenths % 10) s"
}
