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
  /// How many threads have come to the racing `runOnce(for:)` call site: its body, which runs
  /// on the calling thread, holds until all have.
  let layoutVisitors = Atomic(0)
  static let racingThreads = 8

  /// Holds a call site's body until every racing thread has come to it, so that they collide
  /// there. Bounded and unchecked: a thread that comes late only makes the race smaller, and
  /// no verdict depends on it.
  private func waitForTheOthers(_ arrived: borrowing Atomic<Int>) {
    _ = waitUntil(timeout: .milliseconds(100)) {
      arrived.load(ordering: .relaxed) >= Self.racingThreads
    }
  }

  /// Returns whether both call sites had run when it returned.
  func didBecomeVisible() -> Bool {
    onceOnMain(for: self) {
      if DispatchQueue.getSpecific(key: mainQueueKey) != true {
        installedInMainContext.store(false, ordering: .relaxed)
      }
      // No wait for the other threads here: this body holds the main queue, which the suites
      // running beside this one need. They collide here anyway, arriving from `layOut`.
      toolbarInstalls.add(1, ordering: .relaxed)
    }
    onceOnMain(for: self) { menuInstalls.add(1, ordering: .relaxed) }
    return toolbarInstalls.load(ordering: .relaxed) > 0 && menuInstalls.load(ordering: .relaxed) > 0
  }

  /// Returns whether the call site had run when it returned.
  func layOut() -> Bool {
    layoutVisitors.add(1, ordering: .relaxed)
    runOnce(for: self) {
      waitForTheOthers(layoutVisitors)
      layouts.add(1, ordering: .relaxed)
    }
    return layouts.load(ordering: .relaxed) > 0
  }
}

private struct BodyFailed: Error, Equatable {}

/// Used by one test case only (of two that run at once), so that its cells' labels ("for a
/// Ledger", "for a Register") identify them.
private final class Ledger: Sendable {}
private final class Register: Sendable {}

/// Used by one test case only (of two that run at once), so that its cells' labels ("for a
/// Turnstile", "for a Gate") identify them.
private final class Turnstile: Sendable {}
private final class Gate: Sendable {}

/// One call site for each per-object form: the first caller's body fails after `release`, the
/// others succeed. Returns whether this caller's call threw.
private func attempt(
  for object: some AnyObject & Sendable, onMain: Bool, caller: Int, ran: Recorder<Int>,
  started: DispatchSemaphore, release: DispatchSemaphore, _ turn: MainQueueTurn
) -> Bool {
  let body = { () throws(BodyFailed) in
    ran.record(caller)
    guard caller == 0 else { return }
    started.signal()
    if onMain {
      // In main context: bounded, as every hold of the main queue is.
      holdMainQueue(until: release, turn)
    } else {
      // On the caller's thread: bounded only against a hang.
      _ = release.wait(timeout: .now() + TimeScale.seconds(10))
    }
    throw BodyFailed()
  }
  do throws(BodyFailed) {
    if onMain {
      try onceOnMain(for: object) { () throws(BodyFailed) in try body() }
    } else {
      try runOnce(for: object, body)
    }
    return false
  } catch {
    return true
  }
}

/// Starts `count` callers with `start` (passed 0, 1, …), once `started` says the first caller's
/// body runs, each once the one before has queued behind it (the cell labelled with `label`
/// counts it), and then signals `release`, which ends the first body; returns what `start`
/// returned for those that queued, which is all of them unless the test fails. All of it on a
/// thread of its own, not the test's task: the body holds its call site for a bounded time (the
/// main queue for ``TestProcessSettings/mainQueueHold``), and a wait for the cooperative pool,
/// which other tests may keep busy for seconds on a loaded machine, could let that time run out
/// before the callers queue, or hold the call site (and the main queue) after they have.
private func queueBehind<Caller: Sendable>(
  _ started: DispatchSemaphore, label: String, count: Int = 1,
  thenRelease release: DispatchSemaphore,
  sourceLocation: SourceLocation = #_sourceLocation,
  _ start: @escaping @Sendable (Int) -> Caller
) async -> [Caller] {
  let queued =
    await onThread { () -> [Caller] in
      guard started.wait(timeout: .now() + TimeScale.seconds(10)) == .success else {
        return []
      }
      var queued: [Caller] = []
      for caller in 0..<count {
        let call = start(caller)
        guard waitUntil({ waitingCallers(labelContaining: label) == caller + 1 }) else { break }
        queued.append(call)
      }
      release.signal()
      return queued
    } ?? []
  if queued.count < count {
    Issue.record(
      "\(queued.count) of \(count) callers queued behind the first one",
      sourceLocation: sourceLocation
    )
  }
  return queued
}

/// A call of `attempt` on a thread of its own, and whether it threw, once `returned` is
/// signalled. Not a task: a task needs the cooperative pool, which a loaded machine's other tests
/// may keep busy past a test's bounds.
private final class CallerThread: Sendable {
  let returned = DispatchSemaphore(value: 0)
  private let didThrow = Atomic(false)

  var threw: Bool { didThrow.load(ordering: .acquiring) }

  init(_ call: @escaping @Sendable () -> Bool) {
    Thread { [self] in
      didThrow.store(call(), ordering: .releasing)
      returned.signal()
    }.start()
  }
}

private final class Tracked {
  let deinitialized: Recorder<Bool>
  init(_ deinitialized: Recorder<Bool>) { self.deinitialized = deinitialized }
  deinit { deinitialized.record(true) }
}

private final class Plain {}

@Suite("Once per object", .testProcessSettings)
struct PerObjectTests {
  @Test("each call site runs once per object, in main context, across threads")
  func oncePerObjectAndSite() async {
    let windows = (0..<32).map { _ in Window() }
    let earlyReturns = Atomic(0)
    await raceThreads(Window.racingThreads) { _ in
      // Every thread visits the windows in the same order, so that they collide on each.
      for window in windows {
        if !window.didBecomeVisible() { earlyReturns.add(1, ordering: .relaxed) }
        if !window.layOut() { earlyReturns.add(1, ordering: .relaxed) }
      }
    }
    #expect(earlyReturns.load(ordering: .relaxed) == 0)
    #expect(windows.allSatisfy { $0.toolbarInstalls.load(ordering: .relaxed) == 1 })
    #expect(windows.allSatisfy { $0.menuInstalls.load(ordering: .relaxed) == 1 })
    #expect(windows.allSatisfy { $0.layouts.load(ordering: .relaxed) == 1 })
    #expect(windows.allSatisfy { $0.installedInMainContext.load(ordering: .relaxed) })
  }

  @Test(
    "a failed body leaves the call site fresh, and a waiting caller runs its own",
    arguments: [true, false])
  func failureHandsOver(onMain: Bool) async {
    await holdingTheMainQueue { turn in
      let object: any AnyObject & Sendable = onMain ? Ledger() : Register()
      let label = "for a \(type(of: object))"
      let ran = Recorder<Int>()
      let started = DispatchSemaphore(value: 0)
      let release = DispatchSemaphore(value: 0)
      let first = CallerThread {
        attempt(
          for: object, onMain: onMain, caller: 0, ran: ran, started: started, release: release, turn
        )
      }
      defer { release.signal() }
      // The second caller queues up behind the failing body before it fails.
      let second = await queueBehind(started, label: label, thenRelease: release) { _ in
        CallerThread {
          attempt(
            for: object, onMain: onMain, caller: 1, ran: ran, started: started, release: release,
            turn)
        }
      }.first
      #expect(second != nil)
      guard let second else { return }
      guard await wait(for: second.returned) else { return }
      #expect(second.threw == false)
      guard await wait(for: first.returned) else { return }
      #expect(first.threw)
      #expect(ran.recorded == [0, 1])
    }
  }

  @Test(
    "when a body fails, the caller that has waited longest runs next", arguments: [true, false])
  func failureHandsOverInArrivalOrder(onMain: Bool) async {
    await holdingTheMainQueue { turn in
      let object: any AnyObject & Sendable = onMain ? Turnstile() : Gate()
      let label = "for a \(type(of: object))"
      let ran = Recorder<Int>()
      let started = DispatchSemaphore(value: 0)
      let release = DispatchSemaphore(value: 0)
      let returned = DispatchGroup()
      @Sendable func call(_ caller: Int) {
        returned.enter()
        Thread {
          _ = attempt(
            for: object, onMain: onMain, caller: caller, ran: ran, started: started,
            release: release, turn)
          returned.leave()
        }.start()
      }
      call(0)
      defer { release.signal() }
      // Callers 1 and 2 queue up behind the failing body, in this order.
      let queued = await queueBehind(
        started, label: label, count: 2, thenRelease: release
      ) { caller in
        call(caller + 1)
      }.count
      #expect(queued == 2)
      let allReturned = await onThread {
        returned.wait(timeout: .now() + TimeScale.seconds(10)) == .success
      }
      #expect(allReturned == true)
      // Caller 1's body succeeds: caller 2 is answered without running its own.
      #expect(ran.recorded == [0, 1])
    }
  }

  @Test("runOnce runs on the calling thread")
  func runOnceRunsInPlace() {
    let object = Plain()
    let caller = pthread_self()
    var ranOn: pthread_t?
    runOnce(for: object) { ranOn = pthread_self() }
    #expect(ranOn == caller)
  }

  @Test("a done call site is answered on the fast path, from the cache a thread's first call makes")
  func doneCallSiteIsAnsweredFromTheThreadsCache() async {
    let answers = await onThread { () -> [Bool] in
      let object = Plain()
      let site = CallSite(file: #fileID, line: 1, column: 1)
      let before = ObjectCells.isDone(object, at: site)
      runOnce(for: object, file: #fileID, line: 1, column: 1) {}
      return [before, ObjectCells.isDone(object, at: site)]
    }
    #expect(answers == [false, true])
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
    let churn = Self.churnShortLivedObjects()
    #expect(
      churn.reused >= 500,
      "the allocator reused \(churn.reused) addresses; the test proved too little")
    #expect(churn.firstSiteRuns == churn.objects)
    #expect(churn.secondSiteRuns == churn.objects)
  }

  /// Makes short-lived objects, each calling one `runOnce(for:)` site twice and another once,
  /// until the allocator has given 500 of them an address an earlier one had (or 200,000 were
  /// made): under AddressSanitizer freed memory sits in quarantine for a while first (CI keeps
  /// that quarantine small).
  static func churnShortLivedObjects() -> (
    objects: Int, reused: Int, firstSiteRuns: Int, secondSiteRuns: Int
  ) {
    var objects = 0
    var firstSiteRuns = 0
    var secondSiteRuns = 0
    var seen = Set<ObjectIdentifier>()
    var reused = 0
    while reused < 500 && objects < 200_000 {
      let object = Plain()
      objects += 1
      if !seen.insert(ObjectIdentifier(object)).inserted { reused += 1 }
      for _ in 0..<2 {
        runOnce(for: object) { firstSiteRuns += 1 }
      }
      runOnce(for: object) { secondSiteRuns += 1 }
    }
    return (objects, reused, firstSiteRuns, secondSiteRuns)
  }

  /// The body of an exit test of `reentrantRunOnce`, in the exit test's process.
  private static func reentrantRunOnceInItsProcess() async throws {
    boundExitTest()
    final class Node {
      func visit() { runOnce(for: self) { visit() } }
    }
    Node().visit()
  }

  @Test("a body that reaches its own call site for the same object stops with a message", .exitTest)
  func reentrantRunOnce() async {
    #if compiler(>=6.2)
      let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        try await Self.reentrantRunOnceInItsProcess()
      }
    #else
      let result = await expectProcessExit(.failure) {
        try await Self.reentrantRunOnceInItsProcess()
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(
      text.contains(
        "MainOnce: re-entrant call for runOnce(for:) at MainOnceTests/PerObjectTests.swift:"))
    #expect(text.contains("for a Node"))
  }

}

extension PerObjectTests {
  @Test("in this process an object's lifetime is read from its side table, without a weak load")
  func lifetimesAreReadable() {
    #expect(ObjectLifetimes.areReadable)
  }

  /// The body of an exit test of `weakLoadLifetimes`, in the exit test's process.
  private static func weakLoadLifetimesInItsProcess() async throws {
    boundExitTest()
    Instrumentation.objectCellsUseWeakLoads = true
    let (objects, reused, runs, _) = PerObjectTests.churnShortLivedObjects()
    let kept = Plain()
    runOnce(for: kept) {}
    let sideTable = ObjectCells.table.withLock { table in
      table.slots.compactMap { $0 }.first { $0.object === kept }?.sideTable
    }
    if reused < 500 || runs != objects || sideTable != 0 {
      FileHandle.standardError.write(
        Data(
          "reused \(reused), \(runs) runs for \(objects) objects, side table \(sideTable as Any)\n"
            .utf8))
      exit(1)
    }
  }

  @Test(
    "cells that tell lifetimes with a weak load stay done, and a reused address runs again",
    .exitTest)
  func weakLoadLifetimes() async {
    // In a process of its own: the switch holds for every cell the process makes from then on.
    #if compiler(>=6.2)
      let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
        try await Self.weakLoadLifetimesInItsProcess()
      }
    #else
      let result = await expectProcessExit(.success) {
        try await Self.weakLoadLifetimesInItsProcess()
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(text.isEmpty, "\(text)")
  }
}

extension PerObjectTests {
  /// Serialized: the table of object cells is the process's, and the objects one of these tests
  /// frees are the other's stale entries.
  @Suite(
    "Per-object call sites stay done while their objects live and are forgotten after",
    .serialized)
  struct ObjectTable {
    @Test("entries of freed objects are swept")
    func staleEntriesAreSwept() async {
      await offThePool {
        // Objects that earlier tests freed stay in the table until it next grows: count only what
        // this test leaves. Each round frees a thousand objects at once, under a call site of its
        // own, so that no entry takes the place of another and only a sweep removes them.
        let before = ObjectCells.table.withLock { $0.staleCount }
        for round in 0..<10 {
          let objects = (0..<1_000).map { _ in Plain() }
          for object in objects { runOnce(for: object, line: UInt(100_000 + round)) {} }
        }
        let stale = ObjectCells.table.withLock { $0.staleCount } - before
        #expect(stale < 5_000, "\(stale) more stale entries after 10 000 freed objects")
      }
    }

    @Test("thousands of live objects keep their call sites done while the table grows and sweeps")
    func manyLiveObjects() async {
      await offThePool {
        let objects = (0..<5_000).map { _ in Plain() }
        var runs = 0
        for round in 0..<3 {
          for object in objects { runOnce(for: object) { runs += 1 } }
          // Freed objects between rounds make the table sweep while the live ones stay.
          for _ in 0..<2_000 { withExtendedLifetime(Plain()) { runOnce(for: $0) {} } }
          #expect(
            runs == objects.count, "round \(round): \(runs) runs for \(objects.count) objects")
        }
      }
    }
  }
}
