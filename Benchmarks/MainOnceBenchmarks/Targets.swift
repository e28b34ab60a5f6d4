/// The targets, judged from the measurements, with the reason where one is missed.
enum Targets {
  static func evaluate(rows: [FastPathSuite.Row], firstCalls: [FirstCallProcess.Result])
    -> [BenchmarkRun.Target]
  {
    var targets: [BenchmarkRun.Target] = []
    let baseline = rows.first { $0.name == Candidate.baselineName }?.otherThread
    for name in ["onceOnMain(token:)", "MainLazy.value"] {
      guard let timing = rows.first(where: { $0.name == name })?.otherThread, let baseline
      else { continue }
      // Judged at the precision the table prints: two decimals of the ratio of best times.
      let ratio = (timing.best / baseline.best * 100).rounded() / 100
      targets.append(
        BenchmarkRun.Target(
          name: "\(name) fast path ≤ 1.0× dispatch_once_f",
          measured: "\(Report.format(ratio, decimals: 2))× (best of rounds, another thread)",
          met: ratio <= 1.0,
          note: "instructions per call, which do not vary from run to run:"
            + " `MainOnceBenchmarks instructions`"
            + (ratio <= 1.0 ? "" : "; a gap of 1–2% between runs is timing noise")))
    }
    for result in firstCalls {
      let ratio = result.onceOnMain.median / result.mainQueueSync.median
      targets.append(
        BenchmarkRun.Target(
          name: "first call ≤ 1.1× a bare main.sync under \(Report.driverName(result.driver))",
          measured: "\(Report.format(ratio, decimals: 2))× (median)",
          met: ratio <= 1.1,
          note: ratio <= 1.1 ? "" : firstCallReason(result)))
    }
    for result in firstCalls {
      let items = result.race.onceOnMainWorkItems
      targets.append(
        BenchmarkRun.Target(
          name: "racing callers enqueue one main-queue work item"
            + " (\(Report.driverName(result.driver)))",
          measured: "\(Report.format(items, decimals: 2)) per race of \(result.race.threads)",
          met: items == 1, note: ""))
    }
    return targets
  }

  /// Why a first call costs more than a bare `main.sync` under `result`'s driver.
  private static func firstCallReason(_ result: FirstCallProcess.Result) -> String {
    let bare = result.mainQueueSync
    let overhead = result.onceOnMain.median - bare.median
    let spread = bare.median - bare.best
    if overhead <= spread {
      return "the difference, \(Report.format(overhead, decimals: 0)) ns, is within the spread of"
        + " the bare hop itself (best \(Report.format(bare.best, decimals: 0)) ns, median"
        + " \(Report.format(bare.median, decimals: 0)) ns): the hop wakes the main thread, and that"
        + " wake-up's cost varies more than MainOnce adds"
    }
    return "a bare main.sync"
      + (result.driver == "dispatchMain"
        ? " after dispatchMain() runs its block on the calling thread, in"
        : " takes")
      + " about \(Report.format(bare.median, decimals: 0)) ns; MainOnce's first call adds about"
      + " \(Report.format(overhead, decimals: 0)) ns of bookkeeping that a bare hop does not do:"
      + " claiming the token so that racing callers share one hop, and recording the wait so that"
      + " the deadlock detector can see it (three lock round trips, a flight record, a wait-for"
      + " edge). It is paid once per token."
  }
}
