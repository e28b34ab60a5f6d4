import MainOnce

enum Audio {
  static let setupToken = MainOnceToken("audio")
  static let mixer = MainLazy { Mixer() }  // built on first use, in main context
}

func play(_ sound: Sound) {  // any thread
  onceOnMain(token: Audio.setupToken) {
    configureMainThreadOnlyAudioLibrary()  // runs once, on the main queue
  }
  Audio.mixer.value.play(sound)  // Mixer is Sendable: readable from any thread
}
