import Glibc

/// Environment variables, one at a time with getenv. FoundationEssentials' `ProcessInfo.processInfo.environment`
/// builds a dictionary of the whole environment on its first use, at the start of every command
/// (docs/performance.md).
public enum Environment {
  public static func value(_ name: String) -> String? { getenv(name).map { String(cString: $0) } }

  /// The user's home directory: $HOME when it is an absolute path (as the XDG base directory spec reads it), else
  /// the password database's (getpwuid_r: reads /etc/nsswitch.conf and /etc/passwd).
  public static var home: String? {
    if let h = value("HOME"), h.hasPrefix("/") { return h }
    var pw = passwd()
    var result: UnsafeMutablePointer<passwd>?
    var buffer = [CChar](repeating: 0, count: 4096)
    guard getpwuid_r(getuid(), &pw, &buffer, buffer.count, &result) == 0, result != nil, let dir = pw.pw_dir else {
      return nil
    }
    return String(cString: dir)
  }
}
