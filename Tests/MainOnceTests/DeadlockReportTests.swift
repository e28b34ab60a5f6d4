import MainOnce
import Testing

@Suite("DeadlockReport")
struct DeadlockReportTests {
  @Test("a report made by hand carries what it was given, so that a handler can be tested")
  func madeByHand() {
    let report = DeadlockReport(
      kind: .stall, text: "MainOnce: thread 42 has waited 1.0 s", stopsProcess: true,
      callSite: .init(fileID: "App/Setup.swift", line: 12), threads: [42, 43],
      label: "MainOnceToken audio")
    #expect(report.kind == .stall)
    #expect(report.text == "MainOnce: thread 42 has waited 1.0 s")
    #expect(report.description == report.text)
    #expect(report.stopsProcess)
    #expect(report.callSite?.description == "App/Setup.swift:12")
    #expect(report.callSite == .init(fileID: "App/Setup.swift", line: 12))
    #expect(report.threads == [42, 43])
    #expect(report.label == "MainOnceToken audio")
  }

  @Test("a report made with the defaults stops nothing and names no call site, thread or label")
  func defaults() {
    let report = DeadlockReport(kind: .warning, text: "MainOnce: ignoring a setting")
    #expect(!report.stopsProcess)
    #expect(report.callSite == nil)
    #expect(report.threads.isEmpty)
    #expect(report.label == nil)
  }

  @Test("each kind is distinct and named")
  func kinds() {
    let kinds: [DeadlockReport.Kind] = [.cycle, .stall, .stallEnded, .warning]
    #expect(Set(kinds).count == kinds.count)
    #expect(kinds.map(\.description) == ["cycle", "stall", "stallEnded", "warning"])
  }
}
