// swift-tools-version: 6.1
// The documentation's event-loop recipes, compiled verbatim against the real GTK 4 (with its
// GLib), SDL 2 and libuv headers (found with pkg-config): the GLib recipe in a GTK 4 application
// that runs on its own GLib main loop and serves the main queue with MainQueueDriver. `swift
// test` in the main package checks that each recipe appears here line for line; CI builds this
// package, runs the GTK application under Xvfb, and runs the SDL and libuv recipes (SDLRecipe,
// LibuvRecipe), which check what they promise.
//
// Needs the libraries' development packages. On Debian or Ubuntu:
//   apt-get install libglib2.0-dev libgtk-4-dev libsdl2-dev libuv1-dev
import PackageDescription

let package = Package(
  name: "EventLoopExamples",
  products: [.executable(name: "MainOnceGTKExample", targets: ["MainOnceGTKExample"])],
  dependencies: [.package(name: "MainOnce", path: "../..")],
  targets: [
    .systemLibrary(name: "CGTK4", pkgConfig: "gtk4", providers: [.apt(["libgtk-4-dev"])]),
    .systemLibrary(name: "CSDL2", pkgConfig: "sdl2", providers: [.apt(["libsdl2-dev"])]),
    .systemLibrary(name: "CLibuv", pkgConfig: "libuv", providers: [.apt(["libuv1-dev"])]),
    // The kernel thread id, which the GTK example prints to show where its setup ran.
    .target(name: "CThreadID"),
    // The SDL and libuv recipes, each in an executable that runs it once and checks it (CI runs
    // them, the SDL one under SDL's dummy video driver).
    .executableTarget(name: "SDLRecipe", dependencies: ["CSDL2", "CThreadID", mainOnce]),
    .executableTarget(name: "LibuvRecipe", dependencies: ["CLibuv", "CThreadID", mainOnce]),
    // The GTK 4 application, which serves its GLib loop with the article's GLib recipe.
    .executableTarget(name: "MainOnceGTKExample", dependencies: ["CGTK4", "CThreadID", mainOnce]),
  ],
  swiftLanguageModes: [.v6]
)

var mainOnce: Target.Dependency { .product(name: "MainOnce", package: "MainOnce") }
