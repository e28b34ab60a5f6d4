import Foundation

/// Prints a line at once, unbuffered: scenarios that stop the process on purpose must not lose
/// what they said before.
func say(_ line: String) {
  FileHandle.standardOutput.write(Data((line + "\n").utf8))
}
