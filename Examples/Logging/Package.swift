// swift-tools-version: 6.1
// The recipe that routes MainOnce's reports into swift-log, compiled against the real swift-log
// (the article *Deadlocks: what MainOnce proves and what it reports*, "Routing reports to a
// logger"). A package of its own: MainOnce keeps no dependencies, and only this example needs
// swift-log. CI builds it with its tests (`swift build --package-path Examples/Logging
// --build-tests`).
import PackageDescription

let package = Package(
  name: "MainOnceLoggingExample",
  dependencies: [
    .package(name: "MainOnce", path: "../.."),
    .package(url: "https://github.com/apple/swift-log", from: "1.16.0"),
  ],
  targets: [
    .target(
      name: "LoggingRecipe",
      dependencies: [
        .product(name: "MainOnce", package: "MainOnce"),
        .product(name: "Logging", package: "swift-log"),
      ]
    ),
    .testTarget(
      name: "LoggingRecipeTests",
      dependencies: [
        "LoggingRecipe",
        .product(name: "MainOnce", package: "MainOnce"),
        .product(name: "Logging", package: "swift-log"),
      ]
    ),
  ],
  swiftLanguageModes: [.v6]
)
