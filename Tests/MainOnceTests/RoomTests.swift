import Foundation
import Testing

/// The rooms of `Sources/MainOnce` depend one way, as the picture in CONTRIBUTING.md draws them,
/// and `Scripts/check-rooms.sh`, which CI runs, fails on a use against that order.
@Suite("Rooms depend one way, and the check that keeps them so catches a back-reference")
struct RoomTests {
  /// A copy of the sources and of CONTRIBUTING.md, in a directory of its own, to break.
  struct Copy {
    let directory: URL
    var sources: URL { directory.appendingPathComponent("Sources/MainOnce") }
    var contributing: URL { directory.appendingPathComponent("CONTRIBUTING.md") }

    init() throws {
      directory = FileManager.default.temporaryDirectory
        .appendingPathComponent("rooms-\(UUID().uuidString)")
      try FileManager.default.createDirectory(
        at: directory.appendingPathComponent("Sources"), withIntermediateDirectories: true)
      let root = DocumentationTests.root
      try FileManager.default.copyItem(
        at: root.appendingPathComponent("Sources/MainOnce"), to: sources)
      try FileManager.default.copyItem(
        at: root.appendingPathComponent("CONTRIBUTING.md"), to: contributing)
    }

    /// Adds `line` at the end of the file at `path`, under the sources.
    func append(_ line: String, to path: String) throws {
      let file = sources.appendingPathComponent(path)
      let text = try String(contentsOf: file, encoding: .utf8)
      try (text + line + "\n").write(to: file, atomically: true, encoding: .utf8)
    }

    func remove() { try? FileManager.default.removeItem(at: directory) }
  }

  /// Runs the check on `sources` and `contributing` (the repository's by default).
  static func check(
    _ sources: URL? = nil, _ contributing: URL? = nil
  ) async throws -> FixtureProcess.Outcome {
    let script = DocumentationTests.root.appendingPathComponent("Scripts/check-rooms.sh").path
    let outcome = try await FixtureProcess.run(
      "/bin/bash", [script] + [sources, contributing].compactMap { $0?.path },
      timeout: .seconds(60))
    #expect(!outcome.timedOut, "check-rooms.sh did not finish")
    return outcome
  }

  @Test("the rooms as they are use only rooms below them, and their opening comments say so")
  func roomsDependOneWay() async throws {
    let outcome = try await Self.check()
    #expect(outcome.status == 0, "\(outcome.standardOutput)\(outcome.standardError)")
    // The table, a line per room, the engine using nothing above it.
    #expect(outcome.standardOutput.contains("\nEngine        Platform, Reporting\n"))
    #expect(outcome.standardOutput.contains("\nReporting     -\n"))
  }

  @Test(
    "a back-reference added to a copy of the sources fails the check, naming the use",
    arguments: [
      // The engine names the detector, as its park once did.
      (
        "Engine/MainQueueEngine.swift",
        "extension MainQueueEngine { static let watcher: Any.Type = Detector.self }",
        "Engine uses Deadlock, above it: Detector (Engine/MainQueueEngine.swift:"
      ),
      // The platform names a thread's record.
      (
        "Platform/Lock.swift", "func recordOfCaller() -> ThreadRecord { .current }",
        "Platform uses Engine, above it: ThreadRecord (Platform/Lock.swift:"
      ),
      // Two peers: the per-object cells read the detector's setting.
      (
        "PerObject/RunOnceMachine.swift",
        "func cyclePolicyOfCells() -> DeadlockDetection.CyclePolicy { .off }",
        "PerObject uses Deadlock, beside it: DeadlockDetection (PerObject/RunOnceMachine.swift:"
      ),
      // Reporting, which uses nothing, formats with a platform fact.
      (
        "Reporting/CallSite.swift", #"func siteOnThread() -> String { "\(ThreadID.current())" }"#,
        "Reporting uses Platform, above it: ThreadID (Reporting/CallSite.swift:"
      ),
    ])
  func backReferenceIsCaught(file: String, line: String, expected: String) async throws {
    let copy = try Copy()
    defer { copy.remove() }
    try copy.append(line, to: file)
    let outcome = try await Self.check(copy.sources, copy.contributing)
    #expect(outcome.status == 1)
    #expect(outcome.standardOutput.contains(expected), "\(outcome.standardOutput)")
  }

  @Test("a room's name in a comment or a string is no use of it; in interpolated code it is")
  func commentsAndStringsAreNotUses() async throws {
    let copy = try Copy()
    defer { copy.remove() }
    try copy.append(
      #"let engineText = "Detector \(1)" /* Detector */  // Detector"#, to: "Engine/OnceCell.swift")
    #expect(try await Self.check(copy.sources, copy.contributing).status == 0)
    try copy.append(
      #"let engineSlice = "slice \(Detector.slice)""#, to: "Engine/OnceCell.swift")
    let outcome = try await Self.check(copy.sources, copy.contributing)
    #expect(outcome.status == 1)
    #expect(outcome.standardOutput.contains("Engine uses Deadlock, above it: Detector"))
  }

  @Test("an opening comment that names other rooms than its room uses fails the check")
  func openingCommentMustAgree() async throws {
    let copy = try Copy()
    defer { copy.remove() }
    let header = copy.sources.appendingPathComponent("Platform/Platform.swift")
    let text = try String(contentsOf: header, encoding: .utf8)
    let said = "It calls no other room"
    #expect(text.contains(said))
    try text.replacingOccurrences(of: said, with: "It calls `Engine/` and no other room")
      .write(to: header, atomically: true, encoding: .utf8)
    let outcome = try await Self.check(copy.sources, copy.contributing)
    #expect(outcome.status == 1)
    #expect(
      outcome.standardOutput.contains(
        "Platform: its opening comment (Platform/Platform.swift) says it calls Engine, Reporting,"
          + " but it uses Reporting"))
  }
}
