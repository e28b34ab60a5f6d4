// The documentation's examples of tests, compiled as a test target of an app would be.
import MainOnce
import Testing

@testable import DocumentationExamples

// MARK: Using MainOnce in the Swift 6 language mode: tokens in tests

@Test func audioIsSetUp() async throws {
  try await onceOnMain(token: Audio.setupToken) { configureAudio() }
  let done = Audio.setupToken.isDone  // #expect(Audio.setupToken.isDone) does not compile
  #expect(done)
}
