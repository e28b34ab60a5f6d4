import MainOnce

enum Startup {
  static let token = MainOnceToken("startup")
  static let settings = MainLazy { 42 }
}

nonisolated func afterStartup() async -> Int {
  // error (each line): expression is 'async' but is not marked with 'await'. In async code
  // Swift picks the waits that suspend, `try await Startup.token.wait()` and
  // `try await Startup.settings.wait()`; the blocking ones are `noasync`, and would block a
  // thread of the cooperative pool.
  Startup.token.wait()
  return Startup.settings.wait()
}
