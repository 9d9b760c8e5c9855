/// Path strings as NSString's `lastPathComponent` and `deletingLastPathComponent` made them (kept: the
/// outputs are printed and compared).
public enum PathString {
  /// The last component: trailing slashes ignored, "/" for "/", "" for "".
  public static func last(_ path: String) -> String {
    let trimmed = trimmingTrailingSlashes(path)
    if trimmed == "/" { return "/" }
    guard let slash = trimmed.lastIndex(of: "/") else { return trimmed }
    return String(trimmed[trimmed.index(after: slash)...])
  }

  /// The path without its last component: "/a" → "/", "a" → "", "/" → "/", repeated slashes collapsed at the cut.
  public static func deletingLast(_ path: String) -> String {
    var collapsed = ""
    for c in path where !(c == "/" && collapsed.last == "/") { collapsed.append(c) }
    let trimmed = trimmingTrailingSlashes(collapsed)
    if trimmed == "/" { return "/" }
    guard let slash = trimmed.lastIndex(of: "/") else { return "" }
    let parent = trimmingTrailingSlashes(String(trimmed[..<slash]))
    return parent.isEmpty ? "/" : parent
  }

  private static func trimmingTrailingSlashes(_ path: String) -> String {
    var s = Substring(path)
    while s.count > 1, s.last == "/" { s = s.dropLast() }
    return String(s)
  }
}
