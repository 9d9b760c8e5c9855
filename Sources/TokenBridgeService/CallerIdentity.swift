import Glibc
import Platform

/// Who a D-Bus caller is, from what the system says about its process, never from what it passes
/// (docs/dbus-api.md, "Who is calling"): a Flatpak app by its app id, a snap by its name, anything else by its
/// executable. `facetID` is what the server's trusted-facets list must contain.
public struct CallerIdentity: Sendable, Equatable {
  public enum Kind: String, Sendable, Equatable {
    case flatpak
    case snap
    case executable
  }
  public var kind: Kind
  /// The app id, the snap name, or the executable's absolute path.
  public var name: String

  public init(kind: Kind, name: String) {
    self.kind = kind
    self.name = name
  }

  /// `flatpak:app-id:<id>`, `snap:name:<name>`, `unix:exe:<path>`.
  public var facetID: String {
    switch kind {
    case .flatpak: "flatpak:app-id:\(name)"
    case .snap: "snap:name:\(name)"
    case .executable: "unix:exe:\(name)"
    }
  }

  /// The identity of process `pid`, read under `proc` (tests: a fake tree). Nil when the process is gone or its
  /// files cannot be read (the caller cannot be told apart: refused).
  public static func of(pid: Int32, proc: String = "/proc") -> CallerIdentity? {
    let base = "\(proc)/\(pid)"
    if let app = flatpakAppID(base) { return CallerIdentity(kind: .flatpak, name: app) }
    if let snap = snapName(base) { return CallerIdentity(kind: .snap, name: snap) }
    guard let exe = readLink("\(base)/exe"), exe.hasPrefix("/"), !exe.hasSuffix(" (deleted)") else { return nil }
    return CallerIdentity(kind: .executable, name: exe)
  }

  /// The app id in the caller's `/.flatpak-info`, only when the caller's root is not ours: a process that shares
  /// our root sees our file (or none) there; a process in a root of its own (a Flatpak sandbox) got it from flatpak
  /// or wrote it itself. Any unconfined program of this user can make such a root (a user and mount namespace and
  /// a chroot), so the app id is a claim a sandboxed app cannot forge and an unconfined one can: the service relies
  /// on it to tell sandboxed apps apart, not to tell them from the user's own programs (docs/dbus-api.md, "Who is
  /// calling"). The file is the caller's to choose: it is opened without blocking and without following a link,
  /// and read only when it is a regular file of at most 64 KiB.
  static func flatpakAppID(_ base: String) -> String? {
    var theirs = stat()
    var ours = stat()
    guard stat("\(base)/root/", &theirs) == 0, stat("/", &ours) == 0 else { return nil }
    if theirs.st_dev == ours.st_dev && theirs.st_ino == ours.st_ino { return nil }
    guard let bytes = readCallerFile("\(base)/root/.flatpak-info", limit: 64 * 1024) else { return nil }
    return iniValue(String(decoding: bytes, as: UTF8.self), section: "Application", key: "name")
  }

  /// A file in a tree the caller controls: opened non-blocking (a FIFO or a device answers at once instead of
  /// holding the bus thread), not through a symbolic link, read only when it is a regular file of at most
  /// `limit` bytes; nil otherwise.
  static func readCallerFile(_ path: String, limit: Int) -> [UInt8]? {
    let fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var info = stat()
    guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_size <= limit else { return nil }
    let bytes = FileIO.read(fd, limit: limit + 1)
    return bytes.count <= limit ? bytes : nil
  }

  /// `key=` of `[section]` in a GKeyFile text; nil when absent or not a plausible app id.
  static func iniValue(_ text: String, section: String, key: String) -> String? {
    var inSection = false
    for raw in text.split(separator: "\n", omittingEmptySubsequences: true) {
      let line = Trim.whitespace(String(raw), newlines: true)
      if line.hasPrefix("[") {
        inSection = line == "[\(section)]"
        continue
      }
      guard inSection, line.hasPrefix(key + "=") else { continue }
      let v = String(line.dropFirst(key.count + 1))
      return isPlainName(v) ? v : nil
    }
    return nil
  }

  /// The snap in the caller's cgroup path (`…/snap.<name>.<app>…`, as snapd names its scopes).
  static func snapName(_ base: String) -> String? {
    guard let bytes = FileIO.read(path: "\(base)/cgroup", limit: 64 * 1024) else { return nil }
    for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n") {
      for part in line.split(separator: "/") where part.hasPrefix("snap.") {
        let fields = part.split(separator: ".")
        if fields.count >= 3, isPlainName(String(fields[1])) { return String(fields[1]) }
      }
    }
    return nil
  }

  /// Letters, digits, `.`, `-`, `_` only, 1–255 bytes (app ids and snap names are).
  static func isPlainName(_ s: String) -> Bool {
    !s.isEmpty && s.utf8.count <= 255
      && s.utf8.allSatisfy { c in
        (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == 0x2E || c == 0x2D
          || c == 0x5F
      }
  }

  static func readLink(_ path: String) -> String? {
    var buf = [CChar](repeating: 0, count: 4097)
    let n = readlink(path, &buf, 4096)
    guard n > 0 else { return nil }
    return String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }

  /// The process's start time (field 22 of `/proc/<pid>/stat`): the same pid with another start time is another
  /// process.
  public static func startTime(pid: Int32, proc: String = "/proc") -> UInt64? {
    guard let bytes = FileIO.read(path: "\(proc)/\(pid)/stat", limit: 4096) else { return nil }
    let text = String(decoding: bytes, as: UTF8.self)
    // The name (field 2) is in parentheses and may hold spaces: count from the last ")".
    guard let close = text.lastIndex(of: ")") else { return nil }
    let fields = text[text.index(after: close)...].split(separator: " ")
    // fields[0] is field 3 (state): field 22 is fields[19].
    return fields.count > 19 ? UInt64(fields[19]) : nil
  }

  /// The pid a pidfd refers to (`Pid:` in its fdinfo); nil when it is gone (-1) or unreadable.
  public static func pid(ofPidfd fd: Int32) -> Int32? {
    guard let bytes = FileIO.read(path: "/proc/self/fdinfo/\(fd)", limit: 4096) else { return nil }
    for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n") where line.hasPrefix("Pid:") {
      guard let p = Int32(Trim.whitespace(String(line.dropFirst(4)), newlines: true)), p > 0 else { return nil }
      return p
    }
    return nil
  }

  /// A pidfd's process is still running (not readable: a pidfd polls readable once its process exited).
  public static func isAlive(pidfd fd: Int32) -> Bool {
    var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
    return poll(&p, 1, 0) == 0
  }
}
