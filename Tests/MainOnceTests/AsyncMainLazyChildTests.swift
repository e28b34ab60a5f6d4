import Foundation
import MainOnce
import MainOnceFixtureSupport
import Synchronization
import Testing

/// Which tasks started inside an `AsyncMainLazy` build count as the build awaiting itself. Each
/// case runs in an exit test: a wrong stop ends the process, and a wrong wait never ends.
@Suite("AsyncMainLazy tells its build's own tasks from tasks merely started inside it")
struct AsyncMainLazyChildTests {
  /// The body of an exit test of `taskPreferringTheGlobalExecutor`, in the exit test's process.
  private static func taskPreferringTheGlobalExecutorInItsProcess() async throws {
    boundExitTest(seconds: 10)
    let value = try await GlobalPreferenceTask.lazy.get()
    let started = try await GlobalPreferenceTask.started.withLock { $0 }!.value
    exit(value == 1 && started == 1 ? EXIT_SUCCESS : EXIT_FAILURE)
  }

  @Test(
    "a Task(executorPreference: globalConcurrentExecutor) that the build does not wait for gets the value",
    .exitTest)
  func taskPreferringTheGlobalExecutor() async {
    #if compiler(>=6.2)
      await #expect(processExitsWith: .success) {
        try await Self.taskPreferringTheGlobalExecutorInItsProcess()
      }
    #else
      await expectProcessExit(.success) {
        try await Self.taskPreferringTheGlobalExecutorInItsProcess()
      }
    #endif
  }

  /// The body of an exit test of `taskAwaitingUnderTheGlobalExecutor`, in the exit test's process.
  private static func taskAwaitingUnderTheGlobalExecutorInItsProcess() async throws {
    boundExitTest(seconds: 10)
    let value = try await GlobalPreferenceScope.lazy.get()
    let started = try await GlobalPreferenceScope.started.withLock { $0 }!.value
    exit(value == 2 && started == 2 ? EXIT_SUCCESS : EXIT_FAILURE)
  }

  @Test(
    "a Task { } awaiting inside withTaskExecutorPreference(globalConcurrentExecutor) gets the value",
    .exitTest)
  func taskAwaitingUnderTheGlobalExecutor() async {
    #if compiler(>=6.2)
      await #expect(processExitsWith: .success) {
        try await Self.taskAwaitingUnderTheGlobalExecutorInItsProcess()
      }
    #else
      await expectProcessExit(.success) {
        try await Self.taskAwaitingUnderTheGlobalExecutorInItsProcess()
      }
    #endif
  }

  /// The body of an exit test of `buildTaskWithItsOwnPreferenceStops`, in the exit test's process.
  private static func buildTaskWithItsOwnPreferenceStopsInItsProcess() async throws {
    boundExitTest(seconds: 10)
    _ = try? await OwnPreferenceBuild.lazy.get()
  }

  @Test(
    "the build's own task awaiting its value under an executor preference of its own stops",
    .exitTest)
  func buildTaskWithItsOwnPreferenceStops() async {
    #if compiler(>=6.2)
      let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        try await Self.buildTaskWithItsOwnPreferenceStopsInItsProcess()
      }
    #else
      let result = await expectProcessExit(.failure) {
        try await Self.buildTaskWithItsOwnPreferenceStopsInItsProcess()
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(text.contains("awaited its own value while building it"), "\(text)")
    #expect(text.contains(OwnPreferenceBuild.declaration), "\(text)")
    #expect(!text.contains("exit test timed out"), "\(text)")
  }

  /// The bodies of the exit tests of `childWithItsOwnPreferenceIsReported`, in the exit test's
  /// process: a child of an `async let`, or of a task group.
  private static func asyncLetChildWithItsOwnPreferenceInItsProcess() async throws {
    boundExitTest(seconds: 10)
    exitAtTheFirstStallReport()
    _ = try? await ChildWithOwnPreference.lazy.get()
  }

  private static func groupChildWithItsOwnPreferenceInItsProcess() async throws {
    boundExitTest(seconds: 10)
    exitAtTheFirstStallReport()
    _ = try? await GroupChildWithOwnPreference.lazy.get()
  }

  /// A child task that prefers another executor no longer runs on the build's: MainOnce cannot
  /// tell it from a `Task { }`, so it waits, and the stall report names its await's call site.
  @Test(
    "a child that set its own executor preference is named in the stall report by its call site",
    .exitTest,
    arguments: [false, true])
  func childWithItsOwnPreferenceIsReported(inTaskGroup: Bool) async {
    #if compiler(>=6.2)
      // One exit test per argument: before Swift 6.3 an exit test cannot capture a value.
      let result =
        inTaskGroup
        ? await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
          try await Self.groupChildWithItsOwnPreferenceInItsProcess()
        }
        : await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
          try await Self.asyncLetChildWithItsOwnPreferenceInItsProcess()
        }
    #else
      let result = await expectProcessExit(.failure, argument: "\(inTaskGroup)") {
        if inTaskGroup {
          try await Self.groupChildWithItsOwnPreferenceInItsProcess()
        } else {
          try await Self.asyncLetChildWithItsOwnPreferenceInItsProcess()
        }
      }
    #endif
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    let child = inTaskGroup ? GroupChildWithOwnPreference.child : ChildWithOwnPreference.child
    #expect(text.contains("REPORT MainOnce: 2 callers have waited"), "\(text)")
    #expect(
      text.contains(
        "the task awaiting at \(child) was started inside the build with Task { }, or as a child"
          + " task with an executor preference of its own (addTask(executorPreference:),"
          + " withTaskExecutorPreference)"), "\(text)")
    #expect(!text.contains("exit test timed out"), "\(text)")
  }
}

/// A task executor of the test's own, which runs jobs on the global concurrent executor.
private final class OtherExecutor: TaskExecutor {
  func enqueue(_ job: consuming ExecutorJob) {
    globalConcurrentExecutor.enqueue(job)
  }
}

/// A builder that starts a task preferring the global concurrent executor, which awaits the value,
/// and returns without waiting for it.
private enum GlobalPreferenceTask {
  static let declaration = "AsyncMainLazyChildTests.swift:\(#line + 2)"
  static let started = Mutex<Task<Int, any Error>?>(nil)
  static let lazy: AsyncMainLazy<Int> = AsyncMainLazy {
    let task = Task(executorPreference: globalConcurrentExecutor) {
      try await GlobalPreferenceTask.lazy.get()
    }
    started.withLock { $0 = task }
    // The task's await meets the build in flight: it waits beside the build's caller.
    _ = await eventually { callersWaiting { $0.hasSuffix(declaration) } == 2 }
    return 1
  }
}

/// A builder that starts a `Task { }` whose body awaits the value inside
/// `withTaskExecutorPreference(globalConcurrentExecutor)`, and returns without waiting for it.
private enum GlobalPreferenceScope {
  static let declaration = "AsyncMainLazyChildTests.swift:\(#line + 2)"
  static let started = Mutex<Task<Int, any Error>?>(nil)
  static let lazy: AsyncMainLazy<Int> = AsyncMainLazy {
    let task = Task {
      try await withTaskExecutorPreference(globalConcurrentExecutor) {
        try await GlobalPreferenceScope.lazy.get()
      }
    }
    started.withLock { $0 = task }
    // The task's await meets the build in flight: it waits beside the build's caller.
    _ = await eventually { callersWaiting { $0.hasSuffix(declaration) } == 2 }
    return 2
  }
}

/// A builder that awaits its own value in its own task, under an executor preference of its own.
private enum OwnPreferenceBuild {
  static let declaration = "MainOnceTests/AsyncMainLazyChildTests.swift:\(#line + 1)"
  static let lazy: AsyncMainLazy<Int> = AsyncMainLazy {
    try await withTaskExecutorPreference(OtherExecutor()) {
      try await OwnPreferenceBuild.lazy.get() + 1
    }
  }
}

/// A builder that waits for an `async let` child which awaits the value under an executor
/// preference of its own.
private enum ChildWithOwnPreference {
  static let child = "MainOnceTests/AsyncMainLazyChildTests.swift:\(#line + 3)"
  static let lazy: AsyncMainLazy<Int> = AsyncMainLazy {
    async let inner = withTaskExecutorPreference(OtherExecutor()) {
      try await ChildWithOwnPreference.lazy.get()
    }
    return try await inner + 1
  }
}

/// A builder that waits for a task-group child added with an executor preference of its own,
/// which awaits the value.
private enum GroupChildWithOwnPreference {
  static let child = "MainOnceTests/AsyncMainLazyChildTests.swift:\(#line + 4)"
  static let lazy: AsyncMainLazy<Int> = AsyncMainLazy {
    try await withThrowingTaskGroup(of: Int.self) { group in
      group.addTask(executorPreference: OtherExecutor()) {
        try await GroupChildWithOwnPreference.lazy.get()
      }
      return try await group.next()! + 1
    }
  }
}
