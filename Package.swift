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
      dependencies: ["_CMainOnceShims"],
      // `@_staticExclusiveOnly`, as on the standard library's `Atomic` and `Mutex`: a token or
      // lazy value cannot be declared with `var`, so no assignment can reset one.
      swiftSettings: [.enableExperimentalFeature("StaticExclusiveOnly")]
    ),
    // Platform facts by link-time reference (thread ids, libdispatch's main queue), so that
    // they hold in static binaries, where dlsym finds none of them. Underscored: an
    // implementation detail of MainOnce, not a module to import.
    .target(
      name: "_CMainOnceShims",
      linkerSettings: [.linkedLibrary("dispatch", .when(platforms: [.linux]))]
    ),
    .executableTarget(name: "MainOnceDemo", dependencies: ["MainOnce"]),
    // The benchmarks are a package of their own, in Benchmarks/.
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
    // Deliberately broken: CI runs them under ThreadSanitizer and AddressSanitizer to prove
    // that each sanitizer reports what it must.
    .executableTarget(name: "TSanCanary", path: "Tests/TSanCanary"),
    .executableTarget(name: "ASanCanary", path: "Tests/ASanCanary"),
    .testTarget(
      name: "MainOnceTests",
      dependencies: [
        "MainOnce", "MainOnceFixtureSupport", "MainOnceFixture", "MainOnceAsyncFixture",
        "MainOnceDemo",
      ]
    ),
  ],
  swiftLanguageModes: [.v6]
)

for target in package.targets where target.name != "_CMainOnceShims" {
  target.swiftSettings =
    (target.swiftSettings ?? []) + [
      .enableUpcomingFeature("ExistentialAny"),
      .enableUpcomingFeature("MemberImportVisibility"),
      .enableUpcomingFeature("InternalImportsByDefault"),
    ]
}
