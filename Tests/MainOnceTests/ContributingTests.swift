import Foundation
import Testing

/// CONTRIBUTING.md describes CI step by step: its lists must name what `.ci/run` does, so that a
/// step added to CI without a word in CONTRIBUTING fails here.
@Suite("CONTRIBUTING describes the steps .ci/run runs")
struct ContributingTests {
  @Test("its list of what CI checks names every step of .ci/run, in order")
  func stepList() async throws {
    try await offThePool {
      let steps = try CIScript.stepNames()
      let listed = try Contributing.section("### What it checks, in order").compactMap { line in
        // `1. **Builds**, all at once, …`: the bold name after the number.
        line.firstMatch(of: /^\d+\. \*\*([^*]+)\*\*/).map { String($0.1) }
      }
      #expect(steps.count >= 10, "found only \(steps) in .ci/run: is the parsing broken?")
      #expect(
        listed.map { $0.lowercased() } == steps.map { $0.lowercased() },
        "CONTRIBUTING's \"What it checks, in order\" must name each step of .ci/run, in order")
    }
  }

  @Test("its list of builds names every build .ci/run starts, in order")
  func buildList() async throws {
    try await offThePool {
      let builds = try CIScript.buildNames()
      let listed = try Contributing.section("### What it checks, in order").compactMap { line in
        // `   - `debug`, with the tests;`: the name in backticks that starts a build's line.
        line.firstMatch(of: /^   - `([^`]+)`/).map { String($0.1) }
      }
      #expect(builds.count >= 5, "found only \(builds) in .ci/run: is the parsing broken?")
      #expect(listed == builds, "each build of .ci/run must start a line of CONTRIBUTING's list")
    }
  }

  @Test("its commands for running one step by hand are headed by the steps' names, in order")
  func commandsByHand() async throws {
    try await offThePool {
      let steps = try CIScript.stepNames()
      let headings = try Contributing.section("### Running one step by hand").compactMap { line in
        // `# 2. Tests`, or `# 5. Static binaries: what it runs`.
        line.firstMatch(of: /^# \d+\. ([^:(]+)/).map {
          $0.1.trimmingCharacters(in: .whitespaces)
        }
      }
      #expect(
        headings.map { $0.lowercased() } == steps.map { $0.lowercased() },
        "each step of .ci/run must head its commands in CONTRIBUTING, as `# 1. Name`, in order")
    }
  }
}

/// What `.ci/run` runs, read from its text.
private enum CIScript {
  /// The steps that are not checks: installing what the event-loop step needs (CONTRIBUTING's
  /// "What it installs"), and the last line.
  static let notChecks: Set<String> = ["system packages", "CI passed"]

  static func text() throws -> String {
    try String(
      contentsOf: DocumentationTests.root.appendingPathComponent(".ci/run"), encoding: .utf8)
  }

  /// The name of each `step "name: what it does"`, in order, without those that check nothing.
  static func stepNames() throws -> [String] {
    try text().split(separator: "\n").compactMap { line in
      line.firstMatch(of: /^\s*step "([^":,]+)/).map { String($0.1) }
    }
    .filter { !notChecks.contains($0) }
  }

  /// The name of each `build_in_background name command…`, in order.
  static func buildNames() throws -> [String] {
    try text().split(separator: "\n").compactMap { line in
      line.firstMatch(of: #/build_in_background ([a-z-]+) /#).map { String($0.1) }
    }
  }
}

/// CONTRIBUTING.md, read in sections.
private enum Contributing {
  /// The lines under `heading`, up to the next heading of its level or above (lines in code
  /// blocks are not headings).
  static func section(_ heading: String) throws -> [String] {
    let text = try String(
      contentsOf: DocumentationTests.root.appendingPathComponent("CONTRIBUTING.md"),
      encoding: .utf8)
    let level = heading.prefix { $0 == "#" }.count
    var lines: [String] = []
    var inSection = false
    var inCode = false
    for line in text.components(separatedBy: "\n") {
      if line.hasPrefix("```") { inCode.toggle() }
      let hashes = line.prefix { $0 == "#" }.count
      if !inCode, hashes > 0, hashes <= level, line.dropFirst(hashes).hasPrefix(" ") {
        inSection = line == heading
        continue
      }
      if inSection { lines.append(line) }
    }
    #expect(!lines.isEmpty, "CONTRIBUTING.md has no section \(heading)")
    return lines
  }
}
