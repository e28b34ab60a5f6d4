import Foundation

#if canImport(Glibc)
  import Glibc
#endif

/// Prints a scenario's one-line verdict, `PASS …` or `FAIL …`, and exits 0 only on a pass.
func verdict(_ passed: Bool, _ summary: String) -> Never {
  print((passed ? "PASS " : "FAIL ") + summary)
  exit(passed ? 0 : 1)
}

/// Waits `milliseconds` in `poll` on a pipe that never gets input: an event loop that is not
/// Dispatch's and does not serve the main queue meanwhile.
func idleInPoll(milliseconds: Int32) {
  var ends: [Int32] = [0, 0]
  _ = pipe(&ends)
  var events = [pollfd(fd: ends[0], events: Int16(POLLIN), revents: 0)]
  _ = poll(&events, 1, milliseconds)
}
