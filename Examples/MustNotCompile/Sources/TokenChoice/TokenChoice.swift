import MainOnce

enum Tokens {
  static let audio = MainOnceToken("audio")
  static let fonts = MainOnceToken("fonts")
}

func setUp(playback: Bool) {
  // error: 'unknown' is borrowed and cannot be consumed: a conditional expression yields a
  // new value, which would consume the token it picks, and a token cannot be copied.
  onceOnMain(token: playback ? Tokens.audio : Tokens.fonts) {}
}
