internal import Synchronization

/// Counters for MainOnce's benchmarks. Not API: names and meanings may change.
@_spi(Instrumentation)
public enum Instrumentation {
  /// How many work items MainOnce has submitted to the main queue: hops of blocking callers
  /// and drives for callers that do not block.
  public static var mainQueueWorkItems: Int {
    workItems.load(ordering: .relaxed)
  }

  static let workItems = Atomic(0)

  static func noteMainQueueWorkItem() {
    workItems.add(1, ordering: .relaxed)
  }
}
