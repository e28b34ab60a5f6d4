internal import Synchronization

/// Counters for MainOnce's benchmarks. Not API: names and meanings may change.
@_spi(Instrumentation)
public enum Instrumentation {
  /// How many hops MainOnce has sent to the main queue: each is one main-queue work item.
  public static var mainQueueWorkItems: Int {
    hops.load(ordering: .relaxed)
  }

  static let hops = Atomic(0)

  static func noteHop() {
    hops.add(1, ordering: .relaxed)
  }
}
