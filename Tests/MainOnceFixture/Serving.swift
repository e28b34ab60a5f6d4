import Dispatch
import Foundation
import MainOnceFixtureSupport

// Not in main.swift, though only the fixture's scenarios call it: Swift 6.0's compiler crashes
// (an assertion in SILGen, computing the function's captures) on a function declared in
// main.swift that another file calls.

/// Serves the main queue for the rest of the process.
func serveMainQueue(with driver: Driver) -> Never {
  switch driver {
  case .dispatchMain:
    dispatchMain()
  case .runLoop:
    RunLoop.main.run()
    fatalError("RunLoop.main.run() returned")
  case .none, .asyncMain, .mainQueueDriver:
    fatalError("\(driver) does not serve the main queue from this fixture")
  }
}
