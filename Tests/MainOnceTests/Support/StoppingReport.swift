/// The report that stopped the process, as `fatalError` printed it after any reports before it:
/// `File.swift:LINE: Fatal error: ` and then the report's lines. The first line comes back
/// without that prefix, and only if the stop was attributed to a line of `file`: the call site
/// that waited.
func stoppingReport(in text: String, from file: String) -> [String]? {
  let lines = text.split(separator: "\n").map(String.init)
  let prefix = #/(?<file>[^:]+):\d+: Fatal error: /#
  guard let start = lines.firstIndex(where: { $0.prefixMatch(of: prefix) != nil }),
    let match = lines[start].prefixMatch(of: prefix), match.output.file == file
  else { return nil }
  return [String(lines[start][match.range.upperBound...])] + lines[(start + 1)...]
}
