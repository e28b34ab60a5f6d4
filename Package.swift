// swift-tools-version: 6.0
// Every Swift 6 toolchain: MainOnce is built and tested with Swift 6.0.3, 6.2.3 and 6.3.1 on Linux.
import PackageDescription

let package = Package(
  name: "MainOnce",
  // MainOnce is built and tested on Linux only. This entry exists because the standard library's
  // `Synchronization` module, whose `Atomic` and `Mutex` MainOnce uses, is available on Apple
  // platforms from macOS 15 on: without it MainOnce would not compile on an Apple host. Apple
  // platforms are untested.
  platforms: [.macOS(.v15)],
  // One product. `MainOnceDemo` is an executable target, not a product: `swift run MainOnceDemo`
  // works from this package's root, but packages that depend on MainOnce never see it.
  products: [
    .library(name: "MainOnce", targets: ["MainOnce"])
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
    // Test-only targets from here on: none is a product, so packages that depend on MainOnce
    // never build them. The benchmarks are a package of their own, in Benchmarks/.
    //
    // Scenario processes for the tests: each run-loop driver needs a process of its own.
    .target(
      name: "MainOnceFixtureSupport",
      dependencies: ["MainOnce"],
      path: "Tests/MainOnceFixtureSupport"
    ),
    .executableTarget(
      name: "MainOnceFixture",
      // _CMainOnceShims: the platform scenario calls the layout checks themselves.
      dependencies: ["MainOnceFixtureSupport", "CFixtureShims", "_CMainOnceShims"],
      path: "Tests/MainOnceFixture"
    ),
    // System calls Swift cannot make (variadic C functions), for fixture scenarios only.
    .target(name: "CFixtureShims", path: "Tests/CFixtureShims"),
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

for target in package.targets where !["_CMainOnceShims", "CFixtureShims"].contains(target.name) {
  target.swiftSettings =
    (target.swiftSettings ?? []) + [
      .enableUpcomingFeature("ExistentialAny"),
      .enableUpcomingFeature("MemberImportVisibility"),
      .enableUpcomingFeature("InternalImportsByDefault"),
    ]
}
