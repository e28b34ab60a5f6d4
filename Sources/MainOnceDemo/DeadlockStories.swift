import Foundation
import MainOnce

/// The deadlock detector at work. Each story runs in a process of its own.
enum DeadlockStory: String, CaseIterable {
  case cycle, stall, abort, neverServed = "never-served", busy, idle

  var summary: String {
    switch self {
    case .cycle:
      "the main queue waits (tracked) for a worker that needs the stack: proven, stopped in ~100 ms"
    case .stall:
      "the main queue waits on a raw semaphore for that worker: reported, then it recovers"
    case .abort:
      "the same raw semaphore wait, with stalls set to abort: stopped after two stall timeouts"
    case .neverServed:
      "top-level code blocks before it starts a run loop: reported"
    case .busy:
      "the main queue computes for 2 s: reported as busy, never stopped"
    case .idle:
      "the main thread waits in an event loop of its own, not Dispatch's: reported"
    }
  }

  func run() -> Never {
    say("MainOnce demo: \(summary)")
    switch self {
    case .cycle:
      DispatchQueue.main.async {
        let worker = DispatchQueue(label: "thumbnail worker")
        let done = DispatchSemaphore(value: 0)
        worker.async {
          _ = Services.stack.value
          done.signal()
        }
        done.wait(for: .queue(worker))
        // Reached only with MAINONCE_DEADLOCK=service: the wait ran the builder in place.
        say("the main queue built the stack while it waited for the worker; the story ends")
        exit(0)
      }
    case .stall, .abort:
      if self == .abort { DeadlockDetection.stalls = .abort() }
      DispatchQueue.main.async {
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
          _ = Services.stack.value
          done.signal()
        }
        // The abort story is stopped two stall timeouts (2 s) in; its wait is longer, so that a
        // busy machine that starts the worker late still sees it stopped rather than recover.
        let patience = self == .abort ? 10 : 2.5
        if done.wait(timeout: .now() + patience) == .timedOut {
          say("the main queue gave up waiting after \(patience) s; the worker's hop can run now")
        }
        finishAfterStackIsBuilt()
      }
    case .neverServed:
      DispatchQueue.global().async { _ = Services.stack.value }
      usleep(2_000_000)
      say("the main thread starts dispatchMain() after 2 s")
      DispatchQueue.main.async { finishAfterStackIsBuilt() }
    case .busy:
      DispatchQueue.main.async {
        DispatchQueue.global().async { _ = Services.stack.value }
        let end = ContinuousClock.now + .seconds(2)
        var iterations = 0
        while ContinuousClock.now < end { iterations &+= 1 }
        finishAfterStackIsBuilt()
      }
    case .idle:
      DispatchQueue.global().async { _ = Services.stack.value }
      // An event loop that is not Dispatch's, as GLib's or libuv's would be: it waits in poll
      // for input and does not serve the main queue meanwhile.
      var ends: [Int32] = [0, 0]
      _ = pipe(&ends)
      var events = [pollfd(fd: ends[0], events: Int16(POLLIN), revents: 0)]
      _ = poll(&events, 1, 2_000)
      say("the main thread leaves its own event loop and starts dispatchMain() after 2 s")
      DispatchQueue.main.async { finishAfterStackIsBuilt() }
    }
    dispatchMain()
  }

  /// Runs every story in a child process and shows what each printed.
  static func runAll() -> Never {
    var failures = 0
    for story in allCases {
      say("$ MainOnceDemo deadlock \(story.rawValue)")
      let status = StoryProcess.runChild(["deadlock", story.rawValue])
      say("(exit status \(status))\n")
      let expectedToStop = story == .cycle || story == .abort
      if (status != 0) != expectedToStop { failures += 1 }
    }
    exit(failures == 0 ? 0 : 1)
  }
}

/// Waits, off the main queue, until the stack exists, then ends the story.
private func finishAfterStackIsBuilt() {
  DispatchQueue.global().async {
    _ = Services.stack.value
    say("the stack is built; the story ends")
    exit(0)
  }
}
