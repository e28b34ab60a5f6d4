import MainOnce

enum Graphics {
  static let setupToken = MainOnceToken("graphics")
  static let stack = MainLazy { RenderStack() }
}

func drawScene() {  // any thread
  onceOnMain(token: Graphics.setupToken) {
    initializeToolkit()  // runs once, in main context
  }
  render(Graphics.stack.value)  // built once, in main context
}
