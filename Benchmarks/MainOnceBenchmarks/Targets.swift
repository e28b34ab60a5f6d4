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
      let ratio = PairedRatio(timing, over: baseline)
      // Judged at the precision the table prints, two decimals: 1.004 is 1.00.
      let verdict = ratio.verdict(against: 1.005)
      targets.append(
        BenchmarkRun.Target(
          name: "\(name) fast path ≤ 1.0× dispatch_once_f",
          measured: "\(ratio.description), another thread",
          verdict: verdict,
          note: verdict == .met
            ? ""
            : "instructions per call do not vary from run to run:"
              + " `MainOnceBenchmarks instructions` counts them"))
    }
    for result in firstCalls {
      let ratio = PairedRatio(result.onceOnMain, over: result.asyncAndPark)
      let verdict = ratio.verdict(against: 1.1)
      let overBare = PairedRatio(result.onceOnMain, over: result.mainQueueSync)
      targets.append(
        BenchmarkRun.Target(
          name: "first call ≤ 1.1× main.async and a park under"
            + " \(Report.driverName(result.driver))",
          measured: "\(ratio.description); \(overBare.description) a bare main.sync",
          verdict: verdict,
          note: verdict == .met ? "" : firstCallReason(result, verdict)))
    }
    for result in firstCalls {
      let items = result.race.onceOnMainWorkItems
      targets.append(
        BenchmarkRun.Target(
          name: "racing callers enqueue one main-queue work item"
            + " (\(Report.driverName(result.driver)))",
          measured: "\(Report.format(items, decimals: 2)) per race of \(result.race.threads)",
          verdict: items == 1 ? .met : .missed, note: ""))
    }
    return targets
  }

  /// Why a first call costs more than the hop it makes under `result`'s driver, or why the
  /// rounds cannot tell.
  private static func firstCallReason(
    _ result: FirstCallProcess.Result, _ verdict: BenchmarkRun.Verdict
  ) -> String {
    let hop = result.asyncAndPark
    if verdict == .withinNoise {
      return "the rounds disagree: a hop and a park took"
        + " \(Report.format(hop.best, decimals: 0)) to"
        + " \(Report.format(hop.samples.max() ?? .nan, decimals: 0)) ns per call from round to"
        + " round, a spread larger than MainOnce's own bookkeeping"
    }
    return "MainOnce's first call adds about"
      + " \(Report.format(result.onceOnMain.median - hop.median, decimals: 0)) ns to the"
      + " \(Report.format(hop.median, decimals: 0)) ns of a hop and a park: claiming the token so"
      + " that racing callers share one hop, and recording the wait so that the deadlock"
      + " detector can see it. It is paid once per token."
  }
}
