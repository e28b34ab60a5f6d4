import Dispatch
import Foundation
import MainOnceFixtureSupport
import Synchronization
import Testing

@testable import MainOnce

@Suite("Tracked waits", .testProcessSettings)
struct TrackedWaitTests {
  @Test("a tracked wait returns what the wait returns and leaves no edge behind")
  func trackedWaitLeavesNoEdge() async {
    let outcome = await onThread { () -> (Int, Bool) in
      let value = withTrackedWait(for: .work("nothing")) { 42 }
      return (value, ThreadRecord.current.publishedWait.load(ordering: .relaxed) != 0)
    }
    #expect(outcome?.0 == 42)
    #expect(outcome?.1 == false)
  }

  @Test("a tracked semaphore wait for work on another thread completes")
  func semaphoreWaitCompletes() async {
    let result = await onThread { () -> DispatchTimeoutResult in
      let work = WaitTarget.work("background sum")
      let done = DispatchSemaphore(value: 0)
      Thread {
        work.perform { usleep(10_000) }
        done.signal()
      }.start()
      return done.wait(for: work, timeout: .now() + TimeScale.seconds(10))
    }
    #expect(result == .success)
  }

  @Test("a tracked group wait ends when the work leaves, and times out when it never does")
  func groupWait() async {
    let results = await onThread { () -> (Bool, DispatchTimeoutResult) in
      let work = WaitTarget.work("group member")
      let group = DispatchGroup()
      group.enter()
      Thread {
        work.perform { usleep(10_000) }
        group.leave()
      }.start()
      group.wait(for: work)
      let finished = group.wait(timeout: .now()) == .success
      let never = DispatchGroup()
      never.enter()
      return (finished, never.wait(for: .work("absent"), timeout: .now() + .milliseconds(50)))
    }
    #expect(results?.0 == true)
    #expect(results?.1 == .timedOut)
  }

  @Test("trackedSync on a serial queue runs the work there and returns its value")
  func trackedSyncReturnsValue() async {
    let queue = DispatchQueue(label: "tracked.serial")
    let value = await onThread {
      queue.trackedSync { () -> String in
        dispatchPrecondition(condition: .onQueue(queue))
        return "ran"
      }
    }
    #expect(value == "ran")
  }

  /// The body of an exit test of `threadCycle`, in the exit test's process. Each target is
  /// captured on a thread of the program's own (a `Thread`), outside dispatch work: only that
  /// thread can signal it, so the cycle is proven.
  private static func threadCycleInItsProcess() async throws {
    boundExitTest()
    let targets = Locked<[(WaitTarget, Int32)]>([])
    let never = DispatchSemaphore(value: 0)
    for index in 0..<2 {
      Thread {
        // Made before the lock is taken: making the thread's record takes a lock of its own.
        let me = (WaitTarget.currentThread, KernelThread.current)
        targets.withLock { $0.append(me) }
        // The first waits at once; the second once the first sleeps in its wait (bounded:
        // then the cycle is closed the other way).
        _ = waitUntil { targets.withLock { $0.count == 2 } }
        let other = targets.withLock { $0.first { $0.1 != me.1 }! }
        if index == 1 { _ = waitUntil { KernelThread.isAsleep(other.1) } }
        never.wait(for: other.0)
      }.start()
    }
    never.wait()
  }

  @Test("two threads that wait for each other are stopped with both edges", .exitTest)
  func threadCycle() async {
    #if compiler(>=6.2)
      let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        try await Self.threadCycleInItsProcess()
      }
    #else
      let result = await expectProcessExit(.failure) {
        try await Self.threadCycleInItsProcess()
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    let lines = stoppingReport(in: text, from: "MainOnceTests/TrackedWaitTests.swift") ?? []
    #expect(lines.first == "MainOnce: deadlock detected", "\(text)")
    let edge =
      #/^  thread \d+ waits for thread \d+ in DispatchSemaphore\.wait\(for:\) at MainOnceTests/TrackedWaitTests\.swift:\d+; blocked by thread \d+$/#
    #expect(lines.dropFirst().prefix(2).allSatisfy { $0.wholeMatch(of: edge) != nil }, "\(text)")
    // No main queue on this cycle: the hint says what is true of any cycle.
    #expect(lines.contains { $0.hasPrefix(cycleHint) }, "\(text)")
    #expect(!text.contains(mainQueueHint), "\(text)")
  }

  /// The body of an exit test of `queueCycle`, in the exit test's process.
  private static func queueCycleInItsProcess() async throws {
    boundExitTest()
    let queue = DispatchQueue(label: "tracked.cycle")
    let worker = DispatchQueue(label: "tracked.worker")
    let done = DispatchSemaphore(value: 0)
    queue.sync {
      worker.async {
        queue.trackedSync {}
        done.signal()
      }
      done.wait(for: .queue(worker))
    }
  }

  @Test("a cycle through a serial queue's owner is stopped", .exitTest)
  func queueCycle() async {
    #if compiler(>=6.2)
      let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        try await Self.queueCycleInItsProcess()
      }
    #else
      let result = await expectProcessExit(.failure) {
        try await Self.queueCycleInItsProcess()
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    let lines = stoppingReport(in: text, from: "MainOnceTests/TrackedWaitTests.swift")
    #expect(lines?.first == "MainOnce: deadlock detected", "\(text)")
    #expect(
      text.contains(
        "waits for queue \"tracked.cycle\" in DispatchQueue.trackedSync at MainOnceTests/TrackedWaitTests.swift:"
      ))
    #expect(text.contains("which runs that queue"))
    #expect(
      text.contains(
        "waits for queue \"tracked.worker\" in DispatchSemaphore.wait(for:) at MainOnceTests/TrackedWaitTests.swift:"
      ))
  }

  /// Neither thread can look again once blocked in `sync`: the one that closes the deadlock
  /// finds it before it blocks.
  @Test(
    "two trackedSync calls into each other's queues are stopped, whichever closes it", .exitTest,
    arguments: [false, true])
  func trackedSyncCycle(_ theOtherCloses: Bool) async {
    #if compiler(>=6.2)
      // One exit test per argument, each passing it as a literal: before Swift 6.3 an exit
      // test cannot capture a value, not even through a capture list.
      let result =
        theOtherCloses
        ? await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
          Self.runTrackedSyncCycle(theOtherCloses: true)
        }
        : await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
          Self.runTrackedSyncCycle(theOtherCloses: false)
        }
    #else
      let result = await expectProcessExit(.failure, argument: "\(theOtherCloses)") {
        Self.runTrackedSyncCycle(theOtherCloses: theOtherCloses)
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    let lines = stoppingReport(in: text, from: "MainOnceTests/TrackedWaitTests.swift") ?? []
    #expect(lines.first == "MainOnce: deadlock detected", "\(text)")
    for (queue, other) in [("first", "second"), ("second", "first")] {
      #expect(
        lines.contains {
          $0.contains("waits for queue \"tracked.\(queue)\" in DispatchQueue.trackedSync at ")
            && $0.hasSuffix(", which runs that queue")
        }, "\(other): \(text)")
    }
  }

  /// The deadlock of ``trackedSyncCycle(_:)``, in the exit test's process.
  private static func runTrackedSyncCycle(theOtherCloses: Bool) {
    boundExitTest()
    let first = DispatchQueue(label: "tracked.first")
    let second = DispatchQueue(label: "tracked.second")
    // Each thread holds its queue before either asks for the other's.
    let holdsFirst = DispatchSemaphore(value: 0)
    let holdsSecond = DispatchSemaphore(value: 0)
    let other = Atomic<Int32>(0)
    let me = KernelThread.current
    Thread {
      second.sync {
        other.store(KernelThread.current, ordering: .releasing)
        holdsSecond.signal()
        holdsFirst.wait()
        // This thread closes it once the first sleeps in its sync (bounded).
        if theOtherCloses { _ = waitUntil { KernelThread.isAsleep(me) } }
        first.trackedSync {}
      }
    }.start()
    first.sync {
      holdsFirst.signal()
      holdsSecond.wait()
      if !theOtherCloses {
        _ = waitUntil { KernelThread.isAsleep(other.load(ordering: .acquiring)) }
      }
      second.trackedSync {}
    }
  }

  /// The body of an exit test of `concurrentQueueTarget`, in the exit test's process.
  private static func concurrentQueueTargetInItsProcess() async throws {
    boundExitTest()
    _ = WaitTarget.queue(DispatchQueue(label: "wide", attributes: .concurrent))
  }

  @Test("a concurrent queue is rejected as a wait target, naming the call site", .exitTest)
  func concurrentQueueTarget() async {
    #if compiler(>=6.2)
      let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        try await Self.concurrentQueueTargetInItsProcess()
      }
    #else
      let result = await expectProcessExit(.failure) {
        try await Self.concurrentQueueTargetInItsProcess()
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(text.contains("MainOnceTests/TrackedWaitTests.swift:"))
    #expect(
      text.contains(
        "MainOnce: WaitTarget.queue(_:) needs a serial queue, and \"wide\" is concurrent"))
  }

  /// The body of an exit test of `performOnThreadTarget`, in the exit test's process.
  private static func performOnThreadTargetInItsProcess() async throws {
    boundExitTest()
    WaitTarget.currentThread.perform {}
  }

  @Test("perform(_:) on a target that is not work is rejected", .exitTest)
  func performOnThreadTarget() async {
    #if compiler(>=6.2)
      let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        try await Self.performOnThreadTargetInItsProcess()
      }
    #else
      let result = await expectProcessExit(.failure) {
        try await Self.performOnThreadTargetInItsProcess()
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(
      text.contains("MainOnce: perform(_:) runs work for a target made by WaitTarget.work(_:)"))
  }

  @Test("a stall policy set in code is the one that stalls reads back")
  func stallPolicyTakesEffect() {
    // An hour: no stall of a test beside this one is reported, let alone stopped, meanwhile.
    let longer = Duration.seconds(3_600)
    DeadlockDetection.stalls = .abort(after: longer)
    defer { DeadlockDetection.stalls = .report(after: TestProcessSettings.stallTimeout) }
    #expect(DeadlockDetection.stalls == .abort(after: longer))
    #expect(DeadlockDetection.stalls.response == .abort)
    #expect(DeadlockDetection.stalls.timeout == longer)
    #expect(
      "\(DeadlockDetection.StallPolicy.report(after: .milliseconds(250)))" == "report after 250 ms")
    #expect("\(DeadlockDetection.StallPolicy.off)" == "off")
  }

  @Test(
    "a stall timeout under a millisecond is rejected, naming the call site", .exitTest,
    arguments: [Duration.zero, .microseconds(999), .seconds(-1)])
  func tooShortStallTimeout(_ timeout: Duration) async {
    #if compiler(>=6.2)
      // One exit test per argument, each passing it as a literal: before Swift 6.3 an exit
      // test cannot capture a value, not even through a capture list.
      let result: ExitTest.Result?
      switch timeout {
      case .zero:
        result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
          boundExitTest()
          DeadlockDetection.stalls = .abort(after: .zero)
        }
      case .microseconds(999):
        result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
          boundExitTest()
          DeadlockDetection.stalls = .abort(after: .microseconds(999))
        }
      case .seconds(-1):
        result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
          boundExitTest()
          DeadlockDetection.stalls = .abort(after: .seconds(-1))
        }
      default:
        Issue.record("no exit test for the argument \(timeout)")
        return
      }
    #else
      let result = await expectProcessExit(.failure, argument: "\(timeout)") {
        boundExitTest()
        DeadlockDetection.stalls = .abort(after: timeout)
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(
      text.contains(
        #/MainOnceTests/TrackedWaitTests\.swift:\d+: Fatal error: MainOnce: the stall timeout must be from 1 ms to 1 day/#
      ), "\(text)")
  }

  /// The body of an exit test of `loopThroughTimedWait`, in the exit test's process.
  private static func loopThroughTimedWaitInItsProcess() async throws {
    boundExitTest()
    let me = WaitTarget.currentThread
    let other = Locked<(WaitTarget, Int32)?>(nil)
    let never = DispatchSemaphore(value: 0)
    let otherDone = DispatchSemaphore(value: 0)
    let timedOut = Locked(false)
    Thread {
      // Made before the lock is taken: making the thread's record takes a lock of its own.
      let target = (WaitTarget.currentThread, KernelThread.current)
      other.withLock { $0 = target }
      _ = never.wait(for: me, timeout: .now() + .milliseconds(500))  // times out
      timedOut.withLock { $0 = true }
      otherDone.signal()
    }.start()
    // The other thread sleeps in its timed wait (or, on a slow machine, is past it already).
    _ = waitUntil {
      timedOut.withLock { $0 }
        || other.withLock { $0 }.map { KernelThread.isAsleep($0.1) } ?? false
    }
    otherDone.wait(for: other.withLock { $0!.0 })  // no deadline, but ends within 500 ms
  }

  /// Thread B waits for thread A with a deadline; then A waits for B with none. The graph has
  /// a loop, but B's wait ends by itself, so A's wait ends too: no deadlock may be reported.
  @Test("a loop through a timed wait is no deadlock: the timed wait ends by itself", .exitTest)
  func loopThroughTimedWait() async {
    #if compiler(>=6.2)
      let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
        try await Self.loopThroughTimedWaitInItsProcess()
      }
    #else
      let result = await expectProcessExit(.success) {
        try await Self.loopThroughTimedWaitInItsProcess()
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(!text.contains("deadlock detected"), "\(text)")
  }

  /// The body of an exit test of `runOnceCycleHint`, in the exit test's process.
  private static func runOnceCycleHintInItsProcess() async throws {
    boundExitTest()
    let a = CycleNode()
    let b = CycleNode()
    let aEntered = DispatchSemaphore(value: 0)
    let bEntered = DispatchSemaphore(value: 0)
    Thread {
      step(a) {
        aEntered.signal()
        _ = bEntered.wait(timeout: .now() + TimeScale.seconds(5))
        step(b) {}  // waits for the body below, which runs b's call
      }
    }.start()
    step(b) {
      bEntered.signal()
      _ = aEntered.wait(timeout: .now() + TimeScale.seconds(5))
      _ = waitUntilParked()  // the other thread waits for this body
      step(a) {}  // closes the cycle
    }
  }

  /// Two `runOnce(for:)` bodies, on two threads, each wait for the other's call site.
  @Test("two runOnce bodies that wait for each other stop with the once-only-work hint", .exitTest)
  func runOnceCycleHint() async {
    #if compiler(>=6.2)
      let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        try await Self.runOnceCycleHintInItsProcess()
      }
    #else
      let result = await expectProcessExit(.failure) {
        try await Self.runOnceCycleHintInItsProcess()
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    let lines = stoppingReport(in: text, from: "MainOnceTests/TrackedWaitTests.swift") ?? []
    #expect(lines.first == "MainOnce: deadlock detected", "\(text)")
    #expect(
      lines.filter { $0.contains("waits for the body for the same CycleNode in runOnce(for:)") }
        .count == 2, "\(text)")
    #expect(lines.contains { $0.hasPrefix(cycleHint) }, "\(text)")
    #expect(!text.contains(mainQueueHint), "\(text)")
  }
}

/// An object to scope `runOnce(for:)` to.
private final class CycleNode: Sendable {}

/// One `runOnce(for:)` call site for every caller: cells are per object and call site.
private func step(_ node: CycleNode, _ inside: () -> Void) {
  runOnce(for: node) { inside() }
}

private let mainQueueHint = "hint: code that holds the main queue must not block"
private let cycleHint =
  "hint: each of these waits can end only after the next one has: none ever will."

extension TrackedWaitTests {
  @Test("once trackedSync's work has started, its thread no longer waits for the queue")
  func trackedSyncEndsItsWaitWhenItsWorkStarts() async {
    let outcome = await onThread { () -> [Bool] in
      let queue = DispatchQueue(label: "mainonce.tests.entered")
      return queue.trackedSync {
        let me = ThreadRecord.current.id
        let mine = WaitBoard.read { published in
          published.compactMap { $0.wait as? any BlockingWait }.filter { $0.thread == me }
            .map(\.isOver)
        }
        // Published, and over: the graph skips it.
        return [mine.count == 1, mine.first == true]
      }
    }
    #expect(outcome == [true, true])
  }
}
