// swift-tools-version: 6.1
import PackageDescription

let package = Package(
  name: "MainOnce",
  platforms: [.macOS(.v15)],
  products: [
    .library(name: "MainOnce", targets: ["MainOnce"]),
    .executable(name: "MainOnceDemo", targets: ["MainOnceDemo"]),
  ],
  targets: [
    .target(
      name: "MainOnce",
      // `@_staticExclusiveOnly`, as on the standard library's `Atomic` and `Mutex`: a token or
      // lazy value cannot be declared with `var`, so no assignment can reset one.
      swiftSettings: [.enableExperimentalFeature("StaticExclusiveOnly")]
    ),
    .executableTarget(name: "MainOnceDemo", dependencies: ["MainOnce"]),
    // Side-by-side benchmarks: no product, so packages that depend on MainOnce never see them.
    .target(name: "CBenchmarkSupport", path: "Benchmarks/CBenchmarkSupport"),
    .executableTarget(
      name: "MainOnceBenchmarks",
      dependencies: ["MainOnce", "CBenchmarkSupport"],
      path: "Benchmarks/MainOnceBenchmarks"
    ),
    // Scenario processes for the tests: each run-loop driver needs a process of its own.
    .target(
      name: "MainOnceFixtureSupport",
      dependencies: ["MainOnce"],
      path: "Tests/MainOnceFixtureSupport"
    ),
    .executableTarget(
      name: "MainOnceFixture",
      dependencies: ["MainOnceFixtureSupport"],
      path: "Tests/MainOnceFixture"
    ),
    .executableTarget(
      name: "MainOnceAsyncFixture",
      dependencies: ["MainOnceFixtureSupport"],
      path: "Tests/MainOnceAsyncFixture"
    ),
    // Deliberately racy: CI runs it under ThreadSanitizer to prove that TSan reports races.
    .executableTarget(name: "TSanCanary", path: "Tests/TSanCanary"),
    .testTarget(
      name: "MainOnceTests",
      dependencies: [
        "MainOnce", "MainOnceFixtureSupport", "MainOnceFixture", "MainOnceAsyncFixture",
      ]
    ),
  ],
  swiftLanguageModes: [.v6]
)

for target in package.targets where target.name != "CBenchmarkSupport" {
  target.swiftSettings =
    (target.swiftSettings ?? []) + [
      .enableUpcomingFeature("ExistentialAny"),
      .enableUpcomingFeature("MemberImportVisibility"),
      .enableUpcomingFeature("InternalImportsByDefault"),
    ]
}
