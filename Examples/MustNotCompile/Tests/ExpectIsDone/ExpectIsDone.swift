import MainOnce
import Testing

enum Audio {
  static let setupToken = MainOnceToken("audio")
}

@Test func setupIsDone() {
  onceOnMain(token: Audio.setupToken) {}
  // error: global function '__checkPropertyAccess(...)' requires that 'MainOnceToken' conform
  // to 'Copyable': #expect copies what it checks, and a token cannot be copied.
  #expect(Audio.setupToken.isDone)
}
