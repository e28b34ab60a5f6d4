import Foundation
import Testing

/// Exit tests keep off the cooperative pool (see ``ExitTestOffThePool``): every test that has
/// one takes the trait, under it the test and the child tasks Swift Testing starts for it run on
/// ``ExitTestThreads``, and no more of them are in flight than there are slots.
@Suite("Exit tests keep off the cooperative pool")
struct ExitTestThreadsTests {
  @Test("every test with an exit test takes the trait that keeps it off the pool")
  func everyExitTestTakesTheTrait() async throws {
    let directory = DocumentationTests.root.appendingPathComponent("Tests/MainOnceTests")
    let files = try FileManager.default.contentsOfDirectory(atPath: directory.path)
      .filter { $0.hasSuffix(".swift") }
    var testsWithExitTests = 0
    for file in files {
      let text = try String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8)
      for test in Self.testsWithExitTests(in: text) {
        testsWithExitTests += 1
        #expect(
          test.contains(".exitTest"), "\(file): \(test) has an exit test but not .exitTest")
      }
    }
    // The scan found them: 44 tests had exit tests when this was written.
    #expect(testsWithExitTests >= 40)
  }

  #if compiler(>=6.2)
    @Test("under it a test and the child tasks it starts run on threads of their own", .exitTest)
    func testAndChildTasksRunOffThePool() async {
      #expect(ExitTestThreads.isCurrent)
      let children = await withTaskGroup(of: Bool.self) { group in
        for _ in 0..<3 { group.addTask { ExitTestThreads.isCurrent } }
        return await group.reduce(into: [Bool]()) { $0.append($1) }
      }
      #expect(children == [true, true, true])
    }
  #endif

  @Test("a task waits for a slot while all are taken, and gets the first one given back")
  func slotsBoundTheTestsInFlight() async throws {
    let slots = TaskSlots(2)
    await slots.take()
    await slots.take()
    let third = Recorder<Int>()
    let waiter = Task {
      await slots.take()
      third.record(3)
    }
    try await Task.sleep(for: .milliseconds(100))
    #expect(third.count == 0, "a third task took one of two slots")
    slots.give()
    _ = try await withinTimeLimit { await waiter.value }
    #expect(third.recorded == [3])
  }

  /// The `@Test(…)` attribute (up to its `func`) before each exit test in `text`: the test it is
  /// in.
  static func testsWithExitTests(in text: String) -> Set<String> {
    var tests: Set<String> = []
    var nearest: String?
    var rest = Substring(text)
    while let match = rest.firstMatch(of: /@Test\(|#expect\(\s*processExitsWith:/) {
      if match.output.hasPrefix("@Test") {
        let attribute = rest[match.range.lowerBound...]
        nearest = String(
          attribute[..<(attribute.firstRange(of: " func ")?.lowerBound ?? attribute.endIndex)])
      } else if let nearest {
        tests.insert(nearest)
      }
      rest = rest[match.range.upperBound...]
    }
    return tests
  }
}
