enum DemoUsage {
  static let text = """
    usage: MainOnceDemo [scenario]

    Race stories (each exits 0 on its own):
      dispatchMain   threads race to use a main-only stack; dispatchMain() serves the main queue
      runLoop        the same, served by RunLoop.main.run()
      mainActor      the same, from async code on the main actor
      foreign-loop   the same, served by a poll loop of its own through MainQueueDriver

    Diagnostics:
      reentrance     an initializer calls onceOnMain for its own token (stops the process)
      deadlock       every deadlock story below, each in a process of its own
      deadlock cycle | stall | abort | never-served | busy | idle
                     one story: a proven cycle stops the process; stalls are reported,
                     and stop it when stalls abort
    """
}
