// swift-tools-version: 6.1
// Code that must NOT compile: MainOnce's documentation promises that a token or a lazy value
// cannot be declared with `var` (an assignment would replace a done token with a fresh one).
// CI builds this package and requires each error below.
import PackageDescription

let package = Package(
  name: "MustNotCompile",
  dependencies: [.package(name: "MainOnce", path: "../..")],
  targets: [
    .target(name: "VarTokens", dependencies: [.product(name: "MainOnce", package: "MainOnce")])
  ],
  swiftLanguageModes: [.v6]
)
