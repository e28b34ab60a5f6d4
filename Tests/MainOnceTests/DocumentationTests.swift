import Foundation
import Testing

/// The code examples of the documentation are compiled: each one must appear in the Examples
/// package, which CI builds as an app that depends on MainOnce would be built.
@Suite("Documentation")
struct DocumentationTests {
  /// The package's root directory: this file is in `Tests/MainOnceTests`.
  static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent()

  /// A code block of the documentation, and where it is.
  struct Block: CustomStringConvertible {
    let file: String
    let line: Int
    let lines: [String]
    var description: String { "\(file):\(line)" }
  }

  @Test(
    "every Swift example in the README, the DocC articles and the doc comments is in the Examples package, which CI compiles"
  )
  func examplesAreCompiled() async throws {
    try await offThePool {
      let examples = try exampleFiles().map { try significantLines(of: $0) }
      let blocks = try documentationBlocks()
      #expect(blocks.count >= 25, "found only \(blocks.count) examples: is the extraction broken?")
      for block in blocks where !examples.contains(where: { contains($0, block.lines) }) {
        if block.file == "README.md", Self.readmeAppBlocks.contains(where: block.lines.starts) {
          continue  // compiled and run as they stand by .ci/check-readme
        }
        let code = block.lines.joined(separator: "\n")
        Issue.record(
          "the example at \(block) is not in the Examples package, line for line:\n\(code)")
      }
    }
  }

  /// The first lines of the README's `Package.swift` and example, which `.ci/check-readme`
  /// extracts, builds and runs as a new package.
  private static let readmeAppBlocks = [
    ["// swift-tools-version: 6.0"], ["// Sources/App/main.swift"],
  ]

  @Test("the README's install block and example are the ones CI builds and runs as they stand")
  func readmeAppIsChecked() async throws {
    try await offThePool {
      let readme = try documentationBlocks().filter { $0.file == "README.md" }
      for first in Self.readmeAppBlocks {
        #expect(readme.filter { $0.lines.starts(with: first) }.count == 1, "\(first)")
      }
      let ci = try String(contentsOf: Self.root.appendingPathComponent(".ci/run"), encoding: .utf8)
      #expect(ci.contains("build_in_background readme .ci/check-readme"))
      let check = try String(
        contentsOf: Self.root.appendingPathComponent(".ci/check-readme"), encoding: .utf8)
      #expect(check.contains("block \"// swift-tools-version:\""))
      #expect(check.contains("block \"// Sources/App/main.swift\""))
    }
  }

  @Test("the README's Documentation section gives the command CI runs to build the docs")
  func documentationCommand() throws {
    let readme = try String(
      contentsOf: Self.root.appendingPathComponent("README.md"), encoding: .utf8)
    let ci = try String(contentsOf: Self.root.appendingPathComponent(".ci/run"), encoding: .utf8)
    #expect(readme.contains("Scripts/docs.sh"))
    #expect(ci.contains("Scripts/docs.sh"))
  }

  /// The ```swift blocks of the README, the DocC articles and the doc comments in the sources.
  private func documentationBlocks() throws -> [Block] {
    var blocks: [Block] = []
    let articles =
      ["README.md"]
      + (try FileManager.default.contentsOfDirectory(
        atPath: Self.root.appendingPathComponent("Sources/MainOnce/MainOnce.docc").path
      )
      .filter { $0.hasSuffix(".md") }.map { "Sources/MainOnce/MainOnce.docc/\($0)" })
    for article in articles {
      blocks += swiftBlocks(in: try lines(of: article), file: article)
    }
    for source in try swiftFiles(under: "Sources/MainOnce") {
      // Doc comments, without their `///`; other lines become blank, which ends no block.
      let comments = try lines(of: source).map { line -> String in
        let trimmed = line.trimmingCharacters(in: .whitespaces)
        guard trimmed.hasPrefix("///") else { return "" }
        return String(trimmed.dropFirst(3))
      }
      blocks += swiftBlocks(in: comments, file: source)
    }
    return blocks
  }

  private func swiftBlocks(in lines: [String], file: String) -> [Block] {
    var blocks: [Block] = []
    var start: Int?
    for (index, line) in lines.enumerated() {
      let trimmed = line.trimmingCharacters(in: .whitespaces)
      if let opening = start {
        if trimmed == "```" {
          blocks.append(
            Block(
              file: file, line: opening + 1,
              lines: lines[(opening + 1)..<index].map(significant)))
          start = nil
        }
      } else if trimmed == "```swift" {
        start = index
      }
    }
    return blocks
  }

  /// Whether `block` appears in `file` line for line: consecutive lines, each equal to the
  /// block's line but for its indentation.
  private func contains(_ file: [String], _ block: [String]) -> Bool {
    guard block.count <= file.count else { return false }
    return (0...(file.count - block.count)).contains { start in
      file[start..<(start + block.count)].elementsEqual(block)
    }
  }

  private func significantLines(of path: String) throws -> [String] {
    try lines(of: path).map(significant)
  }

  /// A line without its indentation and trailing spaces.
  private func significant(_ line: String) -> String {
    line.trimmingCharacters(in: .whitespaces)
  }

  private func lines(of path: String) throws -> [String] {
    try String(contentsOf: Self.root.appendingPathComponent(path), encoding: .utf8)
      .components(separatedBy: "\n")
  }

  /// The Swift files of the packages that compile the examples: `Examples` and the packages in
  /// it, such as `Examples/EventLoops`, but not `Examples/MustNotCompile`, whose code is there
  /// to be rejected.
  private func exampleFiles() throws -> [String] {
    try swiftFiles(under: "Examples").filter { !$0.hasPrefix("Examples/MustNotCompile/") }
  }

  /// The `.swift` files under `directory`, without hidden directories such as `.build`.
  private func swiftFiles(under directory: String) throws -> [String] {
    let base = Self.root.appendingPathComponent(directory).standardizedFileURL
    guard
      let enumerator = FileManager.default.enumerator(
        at: base, includingPropertiesForKeys: nil, options: [.skipsHiddenFiles])
    else { return [] }
    return enumerator.compactMap { $0 as? URL }.filter { $0.pathExtension == "swift" }
      .map { "\(directory)/\($0.standardizedFileURL.path.dropFirst(base.path.count + 1))" }
  }
}
