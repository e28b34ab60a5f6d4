// swift-tools-version: 6.3
// MainOnce's benchmarks: a package of their own, so that they stay out of the dependency graph
// of every package that depends on MainOnce. From the repository's root:
//
//   swift run -c release --package-path Benchmarks MainOnceBenchmarks
//
// They use MainOnce's public API and its `@_spi(Instrumentation)` counters (how many
// main-queue work items a first call sent), nothing internal. Linux only: they read /proc.
import PackageDescription

let package = Package(
  name: "MainOnceBenchmarks",
  // As in MainOnce's manifest: `Synchronization` needs macOS 15 on Apple hosts (untested).
  platforms: [.macOS(.v15)],
  dependencies: [.package(name: "MainOnce", path: "..")],
  targets: [
    // C baselines (`dispatch_once_f`), CPU affinity and an allocation counter.
    .target(name: "CBenchmarkSupport", path: "CBenchmarkSupport"),
    .executableTarget(
      name: "MainOnceBenchmarks",
      dependencies: [.product(name: "MainOnce", package: "MainOnce"), "CBenchmarkSupport"],
      path: "MainOnceBenchmarks",
      swiftSettings: [
        .enableUpcomingFeature("ExistentialAny"),
        .enableUpcomingFeature("MemberImportVisibility"),
        .enableUpcomingFeature("InternalImportsByDefault"),
      ]
    ),
  ],
  swiftLanguageModes: [.v6]
)
