// swift run MainOnceDemo [dispatchMain | runLoop | mainActor | foreign-loop]
//
// Sets up a main-only "stack" guarded by MainOnce, starts threads that race to use it, serves
// the main queue with the chosen driver, prints what happened and exits. The diagnostic stories
// (`reentrance`, `deadlock`) each run in a child process (`StoryProcess`), so that a story that
// MainOnce stops ends with MainOnce's message, not the Swift runtime's backtrace.
import Foundation

let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first ?? "dispatchMain" {
case "dispatchMain":
  RaceStory(driver: .dispatchMain).start()
case "runLoop":
  RaceStory(driver: .runLoop).start()
case "mainActor":
  RaceStory(driver: .mainActor).start()
case "foreign-loop":
  RaceStory(driver: .foreignLoop).start()
case "reentrance":
  StoryProcess.run(arguments) { Reentrance.run() }
case "deadlock":
  if let name = arguments.dropFirst().first {
    guard let story = DeadlockStory(rawValue: name) else {
      FileHandle.standardError.write(Data((DemoUsage.text + "\n").utf8))
      exit(64)
    }
    StoryProcess.run(arguments) { story.run() }
  }
  DeadlockStory.runAll()
case "help", "-h", "--help":
  print(DemoUsage.text)
default:
  FileHandle.standardError.write(Data((DemoUsage.text + "\n").utf8))
  exit(64)
}
