import Dispatch
import Foundation
import MainOnceFixtureSupport
import Synchronization
import Testing

@testable import MainOnce

/// An object whose call sites count their runs.
private final class Window: Sendable {
  let toolbarInstalls = Atomic(0)
  let menuInstalls = Atomic(0)
  let layouts = Atomic(0)
  let installedInMainContext = Atomic(true)

  func didBecomeVisible() {
    onceOnMain(for: self) {
      if DispatchQueue.getSpecific(key: mainQueueKey) != true {
        installedInMainContext.store(false, ordering: .relaxed)
      }
      toolbarInstalls.add(1, ordering: .relaxed)
    }
    onceOnMain(for: self) { menuInstalls.add(1, ordering: .relaxed) }
  }

  func layOut() {
    runOnce(for: self) {
      layouts.add(1, ordering: .relaxed)
      usleep(1_000)
    }
  }
}

private final class Tracked {
  let deinitialized: Recorder<Bool>
  init(_ deinitialized: Recorder<Bool>) { self.deinitialized = deinitialized }
  deinit { deinitialized.record(true) }
}

private final class Plain {}

@Suite("Once per object")
struct PerObjectTests {
  @Test("each call site runs once per object, in main context, across threads")
  func oncePerObjectAndSite() async {
    let windows = (0..<32).map { _ in Window() }
    await raceThreads(8) { thread in
      for step in 0..<windows.count {
        let window = windows[(step + thread * 5) % windows.count]
        window.didBecomeVisible()
        window.layOut()
      }
    }
    #expect(windows.allSatisfy { $0.toolbarInstalls.load(ordering: .relaxed) == 1 })
    #expect(windows.allSatisfy { $0.menuInstalls.load(ordering: .relaxed) == 1 })
    #expect(windows.allSatisfy { $0.layouts.load(ordering: .relaxed) == 1 })
    #expect(windows.allSatisfy { $0.installedInMainContext.load(ordering: .relaxed) })
  }

  @Test("runOnce runs on the calling thread")
  func runOnceRunsInPlace() {
    let object = Plain()
    let caller = pthread_self()
    var ranOn: pthread_t?
    runOnce(for: object) { ranOn = pthread_self() }
    #expect(ranOn == caller)
  }

  @Test("MainOnce does not keep the object alive")
  func objectIsNotRetained() async {
    let deinitialized = Recorder<Bool>()
    await onThread {
      var object: Tracked? = Tracked(deinitialized)
      onceOnMain(for: object!) {}
      runOnce(for: object!) {}
      object = nil
    }
    #expect(deinitialized.recorded == [true])
  }

  @Test("a new object at a freed object's address runs its call sites again")
  func addressReuseIsANewLifetime() {
    var firstSiteRuns = 0
    var secondSiteRuns = 0
    var seen = Set<ObjectIdentifier>()
    var reused = 0
    for _ in 0..<2_000 {
      let object = Plain()
      if !seen.insert(ObjectIdentifier(object)).inserted { reused += 1 }
      for _ in 0..<2 {
        runOnce(for: object) { firstSiteRuns += 1 }
      }
      runOnce(for: object) { secondSiteRuns += 1 }
    }
    #expect(reused > 0, "the allocator never reused an address; the test proved nothing")
    #expect(firstSiteRuns == 2_000)
    #expect(secondSiteRuns == 2_000)
  }

  @Test("a body that reaches its own call site for the same object stops with a message")
  func reentrantRunOnce() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      boundExitTest()
      final class Node {
        func visit() { runOnce(for: self) { visit() } }
      }
      Node().visit()
    }
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(
      text.contains(
        "MainOnce: re-entrant call for runOnce(for:) at MainOnceTests/PerObjectTests.swift:"))
    #expect(text.contains("for a Node"))
  }

  @Test("entries of freed objects are swept")
  func staleEntriesAreSwept() {
    for _ in 0..<10_000 {
      let object = Plain()
      withExtendedLifetime(object) { runOnce(for: object) {} }
    }
    let entries = ObjectCells.table.withLock { $0.entries.count }
    #expect(entries < 300, "\(entries) entries for 10 000 freed objects")
  }
}
