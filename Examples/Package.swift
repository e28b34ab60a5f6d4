// swift-tools-version: 6.0
// Every code example of MainOnce's README, DocC articles and doc comments, compiled the way an
// app that depends on MainOnce compiles them: a package of its own, in the Swift 6 language
// mode. `swift test` in the main package checks that each example in the documentation appears
// here verbatim; CI builds this package (`swift build --package-path Examples --build-tests`).
// The recipes for GLib, GTK, SDL and libuv are in `EventLoops`, a package that needs those
// libraries.
import PackageDescription

let package = Package(
  name: "MainOnceExamples",
  dependencies: [.package(name: "MainOnce", path: "..")],
  targets: [
    .target(
      name: "DocumentationExamples", dependencies: [.product(name: "MainOnce", package: "MainOnce")]
    ),
    // The examples of tests: Swift Testing's macros, as a test target of an app uses them.
    .testTarget(
      name: "DocumentationTestExamples",
      dependencies: ["DocumentationExamples", .product(name: "MainOnce", package: "MainOnce")]
    ),
  ],
  swiftLanguageModes: [.v6]
)
