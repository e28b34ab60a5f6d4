// swift-tools-version: 6.0
// MainOnce's benchmarks: a package of their own, so that they stay out of the dependency graph
// of every package that depends on MainOnce. From the repository's root:
//
//   swift run -c release --package-path Benchmarks MainOnceBenchmarks
//
// They use MainOnce's public API only, built in release as a dependent package builds it: what
// they count (allocations, main-queue work items) they count from outside, by interposing libc's
// allocator and libdispatch's `dispatch_async_f` (CBenchmarkSupport). Linux only: they read /proc.
// One exception, in a build for tests only: the weak-load rows of the `objects` group, built
// with `-Xswiftc -enable-testing -Xswiftc -DMAINONCE_INSTRUMENTATION` (see README.md).
import PackageDescription

let package = Package(
  name: "MainOnceBenchmarks",
  // As in MainOnce's manifest: `Synchronization` needs macOS 15 on Apple hosts (untested).
  platforms: [.macOS(.v15)],
  dependencies: [.package(name: "MainOnce", path: "..")],
  targets: [
    // C baselines (`dispatch_once_f`), CPU affinity, an allocation counter and a counter of
    // main-queue work items.
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
