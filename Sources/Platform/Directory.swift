import Glibc

/// Directory listings with opendir/readdir, not FoundationEssentials' `contentsOfDirectory` (generic sequence
/// machinery at its first use): discovery lists /sys/class/hidraw in every command (docs/performance.md).
public enum Directory {
  /// The entries of `path` (without "." and ".."); nil when it cannot be read.
  public static func names(_ path: String) -> [String]? {
    guard let dir = opendir(path) else { return nil }
    defer { closedir(dir) }
    var names: [String] = []
    while let entry = readdir(dir) {
      let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
        String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
      }
      if name != "." && name != ".." { names.append(name) }
    }
    return names
  }
}
