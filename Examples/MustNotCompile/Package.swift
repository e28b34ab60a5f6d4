// swift-tools-version: 6.1
// Code that must NOT compile, as MainOnce's documentation says. CI builds each target on its own
// (the compiler stops at the first module with errors) and requires the error it names:
//
// - VarTokens: a token or a lazy value cannot be declared with `var` (an assignment would
//   replace a done token with a fresh one).
// - TokenChoice: `onceOnMain(token: flag ? a : b)`; a token is `~Copyable`, and a conditional
//   expression would consume the one it picks.
// - ExpectIsDone: `#expect(token.isDone)`; Swift Testing's `#expect` copies what it checks.
// - BlockingReadInAsync: `MainLazy.value` in async code off the main actor, where a read
//   before the value is built would block a thread of the cooperative pool.
// - BlockingWaitInAsync: the blocking `wait()` of a token and of a lazy value in async code,
//   for the same reason.
//
// And what MainOnce's own code cannot do (these import it `@testable`): reach the state that a
// lock guards without the lock's proof, or forge that proof.
//
// - UnguardedCell: a gate's state, read without `OnceCell.LockHeld`, and the proof made by hand.
// - UnguardedWaiter: a caller's wake-up and its answer, written without the gate.
// - UnguardedBuild: an `AsyncMainLazy` build's state, changed without `AsyncBuild.LockHeld`.
// - UnguardedObjectCell: a `runOnce(for:)` cell's run, changed without `RunOnceCell.LockHeld`.
import PackageDescription

let package = Package(
  name: "MustNotCompile",
  dependencies: [.package(name: "MainOnce", path: "../..")],
  targets: [
    .target(name: "VarTokens", dependencies: [mainOnce]),
    .target(name: "TokenChoice", dependencies: [mainOnce]),
    .testTarget(name: "ExpectIsDone", dependencies: [mainOnce]),
    .target(name: "BlockingReadInAsync", dependencies: [mainOnce]),
    .target(name: "BlockingWaitInAsync", dependencies: [mainOnce]),
    .target(name: "UnguardedCell", dependencies: [mainOnce]),
    .target(name: "UnguardedWaiter", dependencies: [mainOnce]),
    .target(name: "UnguardedBuild", dependencies: [mainOnce]),
    .target(name: "UnguardedObjectCell", dependencies: [mainOnce]),
  ],
  swiftLanguageModes: [.v6]
)

var mainOnce: Target.Dependency { .product(name: "MainOnce", package: "MainOnce") }
