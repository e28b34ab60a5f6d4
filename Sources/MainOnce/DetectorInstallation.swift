// How the rooms are joined at run time: the engine knows the deadlock detector only as the
// observer of its waits (`Engine/WaitObserver.swift`), and the API installs the detector as that
// observer. Every API that reaches the engine reads `detectorIsInstalled` on its slow path,
// before it calls the engine: the getters of a token's and of a lazy value's cell, the per-object
// calls, an `AsyncMainLazy`'s build. A call that finds its cell done returns before.

/// The deadlock detector, installed as the engine's observer: once per process, by the first
/// slow path that reads this, which runs no line of the detector. Reading it later costs a
/// `swift_once` check.
let detectorIsInstalled: Void = MainQueueEngine.install(observer: Detector.self)
