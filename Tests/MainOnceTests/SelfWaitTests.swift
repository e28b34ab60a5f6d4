import Dispatch
import Foundation
import MainOnceFixtureSupport
import Testing

@testable import MainOnce

#if canImport(Glibc)
  import Glibc
#endif

/// Every wait seen: a tracked wait for what only the waiting thread could run (the main queue
/// from main context, a queue it runs, itself) is a proof on its own, and a queue's target chain
/// is part of what a wait for the queue waits for. Each shape runs in an exit test's process:
/// one that must be stopped, with its message checked; one that must recover, to its end.
///
/// Serialized for Swift before 6.2: there an exit test's process is this test runner filtered to
/// the test function (`expectProcessExit`), which runs every case of a parameterized test. One
/// at a time, the cases before the child's own end before its body starts, and those after it
/// never start; side by side, their output ran into what the child's body printed.
@Suite("Self-waits and target chains", .serialized)
struct SelfWaitTests {
  /// A deadlock through a wait for a target that only the waiting thread could run, or that
  /// waits behind its target.
  enum Stopped: String, CaseIterable, Sendable {
    /// Main-queue code waits for the main queue, whose block would signal.
    case mainQueueFromMain
    /// As `mainQueueFromMain`, with `MAINONCE_PROC=off`: no part of the proof reads `/proc`.
    case mainQueueFromMainWithoutProc
    /// As `mainQueueFromMain`, under the `service` policy, which cannot break it.
    case mainQueueFromMainUnderService
    /// A block on a serial queue waits for that queue, whose next block would signal.
    case ownQueue
    /// A `Thread` waits for `.currentThread` captured on itself.
    case ownThread
    /// Main-queue code waits for a queue that targets the main queue.
    case queueTargetingMain
    /// Main-queue code blocks in `runOnce(for:)`, whose body, on a worker, waits for a queue
    /// that targets the main queue.
    case initializerWaitsForQueueTargetingMain
    /// Main-queue code waits for a queue whose target's running block waits in `onceOnMain`.
    case queueBehindItsTarget
  }

  /// Waits that look like a self-wait or a blocked chain for a while, and end.
  enum Recovers: String, CaseIterable, Sendable {
    /// A wait for work that the waiter performs, signalled by another thread.
    case workPerformedByWaiter
    /// Main-queue code in `trackedSync` on a queue whose target runs a long block, while another
    /// thread waits for the main queue.
    case trackedSyncBehindBusyChain
    /// Main-queue code waits for an inactive queue that targets the main queue, until another
    /// thread retargets and activates it.
    case inactiveQueue
    /// Dispatch work waits for `.currentThread` captured in itself; another job signals.
    case currentThreadInDispatchWork
    /// Main-queue code waits for a queue whose signal is submitted late.
    case lateSignal
    /// Main-queue code waits for a suspended queue, resumed later.
    case suspendedQueue
    /// Main-queue code waits for a queue whose target runs a long block, then signals.
    case busyOwner
  }

  /// The thread in a stalled initializer's way (the main queue's holder) is in a tracked wait.
  enum InTrackedWait: String, CaseIterable, Sendable {
    /// A semaphore wait with a deadline.
    case timed
    /// A semaphore wait for work, which a thread that does not perform it may end.
    case open
    /// The initializer's runner, on the main queue, is in a semaphore wait with a deadline.
    case runner
    /// A semaphore wait with a deadline for a queue whose target is inactive: the report says
    /// where MainOnce stopped reading the queue's chain, and why.
    case inactiveLink
    /// A `trackedSync` behind a long block: the holder does not run at all for a whole stall
    /// timeout, and is reported again as stuck.
    case stuck
  }

  private static let file = "MainOnceTests/SelfWaitTests.swift"

  @Test(
    "a wait that only its own thread, or a held link of its queue's chain, could end is stopped",
    .exitTest,
    arguments: Stopped.allCases)
  func selfWaitOrChainIsStopped(_ shape: Stopped) async {
    #if compiler(>=6.2)
      // One exit test per argument: before Swift 6.3 an exit test cannot capture a value.
      let result: ExitTest.Result?
      switch shape {
      case .mainQueueFromMain:
        result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
          try await Self.stoppedInItsProcess(.mainQueueFromMain)
        }
      case .mainQueueFromMainWithoutProc:
        result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
          try await Self.stoppedInItsProcess(.mainQueueFromMainWithoutProc)
        }
      case .mainQueueFromMainUnderService:
        result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
          try await Self.stoppedInItsProcess(.mainQueueFromMainUnderService)
        }
      case .ownQueue:
        result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
          try await Self.stoppedInItsProcess(.ownQueue)
        }
      case .ownThread:
        result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
          try await Self.stoppedInItsProcess(.ownThread)
        }
      case .queueTargetingMain:
        result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
          try await Self.stoppedInItsProcess(.queueTargetingMain)
        }
      case .initializerWaitsForQueueTargetingMain:
        result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
          try await Self.stoppedInItsProcess(.initializerWaitsForQueueTargetingMain)
        }
      case .queueBehindItsTarget:
        result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
          try await Self.stoppedInItsProcess(.queueBehindItsTarget)
        }
      }
    #else
      let result = await expectProcessExit(.failure, argument: shape.rawValue) {
        try await Self.stoppedInItsProcess(shape)
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    let lines = stoppingReport(in: text, from: Self.file) ?? []
    #expect(lines.first == "MainOnce: deadlock detected", "\(text)")
    let edges = lines.dropFirst().prefix { $0.hasPrefix("  thread ") }
    let call = " in DispatchSemaphore.wait(for:) at \(Self.file):"
    #expect(edges.contains { $0.contains(call) }, "\(text)")
    let onlyItself = "(itself)"
    let only = ": only this thread could run what would end the wait"
    switch shape {
    case .mainQueueFromMain, .mainQueueFromMainWithoutProc, .mainQueueFromMainUnderService:
      #expect(
        edges.contains {
          $0.contains("waits for the main queue\(call)")
            && $0.hasSuffix("\(onlyItself), which holds the main queue\(only)")
        }, "\(text)")
      if shape == .mainQueueFromMainUnderService {
        #expect(
          lines.contains(
            "  the service policy cannot break this cycle: no MainOnce initializer on it waits"
              + " to run on the main queue"), "\(text)")
      }
    case .ownQueue:
      #expect(
        edges.contains {
          $0.contains("waits for queue \"self-wait.own\"\(call)")
            && $0.hasSuffix("\(onlyItself), which runs that queue\(only)")
        }, "\(text)")
    case .ownThread:
      #expect(edges.contains { $0.hasSuffix(" \(onlyItself)\(only)") }, "\(text)")
    case .queueTargetingMain:
      #expect(
        edges.contains {
          $0.contains("waits for queue \"self-wait.on-main\"\(call)")
            && $0.hasSuffix("\(onlyItself), which holds the main queue\(only)")
        }, "\(text)")
    case .initializerWaitsForQueueTargetingMain:
      #expect(edges.count == 2, "\(text)")
      #expect(
        edges.contains {
          $0.contains("waits for queue \"self-wait.on-main\"\(call)")
            && $0.hasSuffix(", which holds the main queue")
        }, "\(text)")
    case .queueBehindItsTarget:
      #expect(edges.count == 2, "\(text)")
      #expect(
        edges.contains {
          $0.contains("waits for queue \"self-wait.front\"\(call)")
            && $0.hasSuffix(", which runs queue \"self-wait.behind\", a target of that queue")
        }, "\(text)")
    }
    if [.mainQueueFromMain, .ownQueue, .ownThread, .queueTargetingMain].contains(shape) {
      #expect(lines.contains { $0.hasPrefix("hint: a thread waits for work that only it") })
    }
  }

  @Test(
    "a wait that looks blocked for a while and then ends is never stopped", .exitTest,
    arguments: Recovers.allCases)
  func lookingBlockedRecovers(_ shape: Recovers) async {
    #if compiler(>=6.2)
      let result: ExitTest.Result?
      switch shape {
      case .workPerformedByWaiter:
        result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
          try await Self.recoversInItsProcess(.workPerformedByWaiter)
        }
      case .trackedSyncBehindBusyChain:
        result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
          try await Self.recoversInItsProcess(.trackedSyncBehindBusyChain)
        }
      case .inactiveQueue:
        result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
          try await Self.recoversInItsProcess(.inactiveQueue)
        }
      case .currentThreadInDispatchWork:
        result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
          try await Self.recoversInItsProcess(.currentThreadInDispatchWork)
        }
      case .lateSignal:
        result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
          try await Self.recoversInItsProcess(.lateSignal)
        }
      case .suspendedQueue:
        result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
          try await Self.recoversInItsProcess(.suspendedQueue)
        }
      case .busyOwner:
        result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
          try await Self.recoversInItsProcess(.busyOwner)
        }
      }
    #else
      let result = await expectProcessExit(.success, argument: shape.rawValue) {
        try await Self.recoversInItsProcess(shape)
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(text.contains("DONE \(shape.rawValue)"), "\(text)")
    // Neither stopped nor reported as a possible deadlock.
    #expect(!text.contains("deadlock"), "\(text)")
  }
}

extension SelfWaitTests {
  @Test("under the report policy, a self-wait is reported once and waiting goes on", .exitTest)
  func selfWaitUnderReportPolicy() async {
    #if compiler(>=6.2)
      let result = await #expect(
        processExitsWith: .success, observing: [\.standardErrorContent]
      ) {
        try await Self.reportedInItsProcess()
      }
    #else
      let result = await expectProcessExit(.success, argument: "reported") {
        try await Self.reportedInItsProcess()
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(text.contains("REPORT cycle MainOnce: deadlock detected\n"), "\(text)")
    #expect(
      text.contains("(itself), which holds the main queue: only this thread could run what would"),
      "\(text)")
    #expect(text.contains("STILL WAITING after 1 report"), "\(text)")
    #expect(!text.contains("Fatal error"), "\(text)")
  }

  /// The body of `selfWaitUnderReportPolicy`'s exit test: main-queue code waits for the main
  /// queue under the `report` policy; the process ends by itself, after the report, once the
  /// wait has gone on for two more seconds (scaled) without being stopped.
  fileprivate static func reportedInItsProcess() async throws {
    boundExitTest()
    DeadlockDetection.cycles = .report
    let reports = Locked(0)
    let reported = DispatchSemaphore(value: 0)
    DeadlockDetection.reportHandler = { report in
      guard report.kind == .cycle else { return }
      FileHandle.standardError.write(Data("REPORT cycle \(report.text)\n".utf8))
      reports.withLock { $0 += 1 }
      reported.signal()
    }
    DispatchQueue.main.async {
      let done = DispatchSemaphore(value: 0)
      DispatchQueue.main.async { done.signal() }
      done.wait(for: .queue(.main))
    }
    guard reported.wait(timeout: .now() + TimeScale.seconds(5)) == .success else {
      note("NOT REPORTED")
      exit(EXIT_FAILURE)
    }
    _ = DispatchSemaphore(value: 0).wait(timeout: .now() + TimeScale.seconds(2))
    note("STILL WAITING after \(reports.withLock { $0 }) report")
    exit(EXIT_SUCCESS)
  }
}

extension SelfWaitTests {
  @Test(
    "a stall behind a tracked wait says waiting goes on until it ends, and why it is not proven",
    .exitTest,
    arguments: InTrackedWait.allCases)
  func stallBehindTrackedWaitSaysSo(_ shape: InTrackedWait) async {
    #if compiler(>=6.2)
      let result: ExitTest.Result?
      switch shape {
      case .timed:
        result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
          try await Self.stallBehindTrackedWaitInItsProcess(.timed)
        }
      case .open:
        result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
          try await Self.stallBehindTrackedWaitInItsProcess(.open)
        }
      case .runner:
        result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
          try await Self.stallBehindTrackedWaitInItsProcess(.runner)
        }
      case .inactiveLink:
        result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
          try await Self.stallBehindTrackedWaitInItsProcess(.inactiveLink)
        }
      case .stuck:
        result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
          try await Self.stallBehindTrackedWaitInItsProcess(.stuck)
        }
      }
    #else
      let result = await expectProcessExit(.success, argument: shape.rawValue) {
        try await Self.stallBehindTrackedWaitInItsProcess(shape)
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(text.contains("DONE"), "\(text)")
    #expect(text.contains("REPORT MainOnce: "), "\(text)")
    #expect(text.contains("hint: waiting goes on until that wait ends"), "\(text)")
    #expect(!text.contains("make that wait a tracked wait"), "\(text)")
    let cannot = "MainOnce cannot prove a cycle through that wait: "
    switch shape {
    case .timed:
      #expect(text.contains(cannot + "it has a deadline, and ends by itself"), "\(text)")
    case .runner:
      #expect(text.contains("the initializer has run on thread "), "\(text)")
      #expect(text.contains(cannot + "it has a deadline, and ends by itself"), "\(text)")
    case .open:
      #expect(
        text.contains(
          cannot + "it waits for work \"loader\", which a thread that does not perform it now"
            + " may still end"), "\(text)")
    case .inactiveLink:
      #expect(
        text.contains(
          "waits for queue \"self-wait.front\" in DispatchSemaphore.wait(for:timeout:) at"
            + " \(Self.file):"), "\(text)")
      #expect(
        text.contains(
          " (MainOnce reads queue \"self-wait.front\"'s target chain no further: queue"
            + " \"self-wait.inactive\" is inactive: its target may still change)"), "\(text)")
    case .stuck:
      #expect(text.contains("it has not run at all in the last"), "\(text)")
      #expect(!text.contains(cannot), "\(text)")
    }
  }

  /// The body of an exit test of `stallBehindTrackedWaitSaysSo`: main-queue code blocks in the
  /// shape's tracked wait for 1.2 s (scaled) while a worker waits in `onceOnMain`; every stall
  /// report goes to standard error, and the process ends once the worker returns.
  fileprivate static func stallBehindTrackedWaitInItsProcess(_ shape: InTrackedWait) async throws {
    boundExitTest()
    DeadlockDetection.stalls = .report(after: .milliseconds(200))
    DeadlockDetection.reportHandler = { report in
      FileHandle.standardError.write(Data("REPORT \(report.text)\n".utf8))
    }
    let hold = TimeScale.seconds(1.2)
    let ended = DispatchSemaphore(value: 0)
    let behind = DispatchQueue(label: "self-wait.held")
    let running = DispatchSemaphore(value: 0)
    if shape == .stuck {
      behind.async {
        running.signal()
        usleep(useconds_t(hold * 1_000_000))
      }
      _ = running.wait(timeout: .now() + TimeScale.seconds(5))
    }
    if shape == .runner {
      Thread {
        onceOnMain(token: SelfWaitTokens.hop) {
          _ = DispatchSemaphore(value: 0).wait(for: .queue(behind), timeout: .now() + hold)
        }
        ended.signal()
      }.start()
    }
    DispatchQueue.main.async {
      guard shape != .runner else { return }
      Thread {
        onceOnMain(token: SelfWaitTokens.hop) {}
        ended.signal()
      }.start()
      switch shape {
      case .timed:
        _ = DispatchSemaphore(value: 0).wait(for: .queue(behind), timeout: .now() + hold)
      case .open:
        let loader = WaitTarget.work("loader")
        let done = DispatchSemaphore(value: 0)
        Thread {
          usleep(useconds_t(hold * 1_000_000))
          done.signal()
        }.start()
        done.wait(for: loader)
      case .inactiveLink:
        let inactive = DispatchQueue(label: "self-wait.inactive", attributes: .initiallyInactive)
        let front = DispatchQueue(label: "self-wait.front", target: inactive)
        _ = DispatchSemaphore(value: 0).wait(for: .queue(front), timeout: .now() + hold)
        inactive.activate()  // releasing an inactive queue traps
      case .stuck:
        behind.trackedSync {}
      case .runner:
        break
      }
    }
    guard ended.wait(timeout: .now() + TimeScale.seconds(8)) == .success else {
      note("HUNG")
      exit(4)
    }
    note("DONE")
  }
}

/// Tokens of the shapes, one per process.
private enum SelfWaitTokens {
  static let hop = MainOnceToken("self-wait hop")
}

/// The call site of `runOnce(for:)` that both of a shape's callers reach.
private func oneStep(for object: AnyObject, _ body: () -> Void) {
  runOnce(for: object, body)
}

private final class Site: Sendable {}

/// Writes a line to standard error at once (an exit test's output must survive `exit`).
private func note(_ line: String) {
  FileHandle.standardError.write(Data((line + "\n").utf8))
}

extension SelfWaitTests {
  /// The body of an exit test of `selfWaitOrChainIsStopped`, in the exit test's process: it
  /// never returns.
  fileprivate static func stoppedInItsProcess(_ shape: Stopped) async throws {
    if shape == .mainQueueFromMainWithoutProc { setenv("MAINONCE_PROC", "off", 1) }
    if shape == .mainQueueFromMainUnderService { DeadlockDetection.cycles = .service }
    boundExitTest()
    let never = DispatchSemaphore(value: 0)
    switch shape {
    case .mainQueueFromMain, .mainQueueFromMainWithoutProc, .mainQueueFromMainUnderService:
      DispatchQueue.main.async {
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.main.async { done.signal() }
        done.wait(for: .queue(.main))
      }
    case .ownQueue:
      let queue = DispatchQueue(label: "self-wait.own")
      queue.async {
        let done = DispatchSemaphore(value: 0)
        queue.async { done.signal() }
        done.wait(for: .queue(queue))
      }
    case .ownThread:
      Thread {
        let me = WaitTarget.currentThread
        DispatchSemaphore(value: 0).wait(for: me)
      }.start()
    case .queueTargetingMain:
      let queue = DispatchQueue(label: "self-wait.on-main", target: .main)
      DispatchQueue.main.async {
        let done = DispatchSemaphore(value: 0)
        queue.async { done.signal() }
        done.wait(for: .queue(queue))
      }
    case .initializerWaitsForQueueTargetingMain:
      let queue = DispatchQueue(label: "self-wait.on-main", target: .main)
      let site = Site()
      DispatchQueue.main.async {
        let bodyRuns = DispatchSemaphore(value: 0)
        Thread {
          oneStep(for: site) {
            let done = DispatchSemaphore(value: 0)
            queue.async { done.signal() }
            bodyRuns.signal()
            done.wait(for: .queue(queue))
          }
        }.start()
        _ = bodyRuns.wait(timeout: .now() + TimeScale.seconds(5))
        oneStep(for: site) {}
      }
    case .queueBehindItsTarget:
      let behind = DispatchQueue(label: "self-wait.behind")
      let front = DispatchQueue(label: "self-wait.front", target: behind)
      DispatchQueue.main.async {
        let running = DispatchSemaphore(value: 0)
        behind.async {
          running.signal()
          onceOnMain(token: SelfWaitTokens.hop) {}
        }
        _ = running.wait(timeout: .now() + TimeScale.seconds(5))
        let done = DispatchSemaphore(value: 0)
        front.async { done.signal() }
        done.wait(for: .queue(front))
      }
    }
    never.wait()
  }

  /// The body of an exit test of `lookingBlockedRecovers`, in the exit test's process: it
  /// returns once the shape's wait has ended. Each looks blocked for 300 ms at least: long
  /// enough for the detector to stop it, had it a proof.
  fileprivate static func recoversInItsProcess(_ shape: Recovers) async throws {
    boundExitTest()
    let pause = useconds_t(300_000)
    let ended = DispatchSemaphore(value: 0)
    switch shape {
    case .workPerformedByWaiter:
      Thread {
        let job = WaitTarget.work("job")
        job.perform {
          let done = DispatchSemaphore(value: 0)
          Thread {
            usleep(pause)
            done.signal()
          }.start()
          done.wait(for: job)
        }
        ended.signal()
      }.start()
    case .trackedSyncBehindBusyChain:
      let behind = DispatchQueue(label: "self-wait.busy")
      let front = DispatchQueue(label: "self-wait.front", target: behind)
      let running = DispatchSemaphore(value: 0)
      behind.async {
        running.signal()
        usleep(pause)
      }
      _ = running.wait(timeout: .now() + TimeScale.seconds(5))
      DispatchQueue.main.async {
        front.trackedSync {}
      }
      // A watched wait behind the sync's thread: it looks at the graph while the sync waits.
      Thread {
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.main.async { done.signal() }
        done.wait(for: .queue(.main))
        ended.signal()
      }.start()
    case .inactiveQueue:
      let queue = DispatchQueue(
        label: "self-wait.inactive", attributes: .initiallyInactive, target: .main)
      DispatchQueue.main.async {
        let done = DispatchSemaphore(value: 0)
        queue.async { done.signal() }
        Thread {
          usleep(pause)
          queue.setTarget(queue: DispatchQueue(label: "self-wait.elsewhere"))
          queue.activate()
        }.start()
        done.wait(for: .queue(queue))
        ended.signal()
      }
    case .currentThreadInDispatchWork:
      DispatchQueue.global().async {
        let me = WaitTarget.currentThread
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
          usleep(pause)
          done.signal()
        }
        done.wait(for: me)
        ended.signal()
      }
    case .lateSignal:
      let behind = DispatchQueue(label: "self-wait.behind")
      let front = DispatchQueue(label: "self-wait.front", target: behind)
      DispatchQueue.main.async {
        let done = DispatchSemaphore(value: 0)
        Thread {
          usleep(pause)
          front.async { done.signal() }
        }.start()
        done.wait(for: .queue(front))
        ended.signal()
      }
    case .suspendedQueue:
      let queue = DispatchQueue(label: "self-wait.suspended")
      queue.suspend()
      DispatchQueue.main.async {
        let done = DispatchSemaphore(value: 0)
        queue.async { done.signal() }
        Thread {
          usleep(pause)
          queue.resume()
        }.start()
        done.wait(for: .queue(queue))
        ended.signal()
      }
    case .busyOwner:
      let behind = DispatchQueue(label: "self-wait.busy")
      let front = DispatchQueue(label: "self-wait.front", target: behind)
      DispatchQueue.main.async {
        let done = DispatchSemaphore(value: 0)
        front.async { usleep(pause) }
        behind.async { usleep(pause) }
        front.async { done.signal() }
        done.wait(for: .queue(front))
        ended.signal()
      }
    }
    guard ended.wait(timeout: .now() + TimeScale.seconds(8)) == .success else {
      note("HUNG \(shape.rawValue)")
      exit(4)
    }
    note("DONE \(shape.rawValue)")
  }
}
