import FoundationEssentials

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// The process that owns a pending registration: its pid and start time (clock ticks after boot,
/// `/proc/<pid>/stat` field 22), so that a pid reused by another process is not taken for the owner.
struct ProcessOwner: Equatable, Sendable {
  var pid: Int32
  var start: Int64

  static let current = ProcessOwner(pid: getpid(), start: status(of: getpid())?.start ?? 0)

  /// Whether the owner still runs: a process with this pid exists, is not a zombie and started at `start`.
  var isAlive: Bool {
    guard pid > 0 else { return false }
    if let s = Self.status(of: pid) { return !s.zombie && s.start == start }
    // No /proc entry: gone, unless /proc is not there at all (then the pid alone decides).
    return kill(pid, 0) == 0 || errno == EPERM
  }

  /// State and start time from `/proc/<pid>/stat`; nil if there is no such entry.
  static func status(of pid: Int32) -> (zombie: Bool, start: Int64)? {
    let fd = open("/proc/\(pid)/stat", O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var buffer = [UInt8](repeating: 0, count: 4096)
    let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
    guard n > 0 else { return nil }
    // "pid (comm) state ppid …": comm may hold spaces and parentheses, so fields count from the last ')'.
    let line = buffer[..<n]
    guard let close = line.lastIndex(of: UInt8(ascii: ")")) else { return nil }
    let fields = line[(close + 1)...].split(separator: UInt8(ascii: " "))
    // fields[0] is field 3 (state); field 22 (starttime) is fields[19].
    guard fields.count > 19, let start = Int64(String(decoding: fields[19], as: UTF8.self)) else { return nil }
    let state = fields[0].first
    return (state == UInt8(ascii: "Z") || state == UInt8(ascii: "X"), start)
  }
}
