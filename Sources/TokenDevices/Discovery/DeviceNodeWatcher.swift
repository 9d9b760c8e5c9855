import Dispatch
import FoundationEssentials

#if canImport(Glibc)
  import Glibc
#endif

/// Waits for a FIDO2 key to be unplugged and plugged back in by watching its device node's directory with
/// inotify (no polling): `/dev` for a hidraw key (the node goes, a `hidrawN` comes, perhaps with another N,
/// and becomes usable when udev has set its permissions: IN_ATTRIB), the socket's directory for a virtual key
/// (virtual-token removes the socket file at unplug and renames a listening one into place at plug-in).
///
/// Make the watcher *before* telling the user to unplug, so no event is missed.
public final class DeviceNodeWatcher {
  public enum WaitError: Error, Equatable, Sendable {
    /// The deadline passed; `removed`: whether the key had been seen leaving.
    case timedOut(removed: Bool)
    /// inotify could not be used (errno).
    case unavailable(Int32)
  }

  let directory: String
  let name: String
  let isVirtual: Bool
  let fd: Int32

  /// Watches the node at `path` (a hidraw path, or a virtual key's socket).
  public init(path: String, isVirtual: Bool) throws(WaitError) {
    let url = URL(fileURLWithPath: path)
    directory = url.deletingLastPathComponent().path
    name = url.lastPathComponent
    self.isVirtual = isVirtual
    let fd = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
    guard fd >= 0 else { throw .unavailable(errno) }
    let mask = UInt32(IN_CREATE | IN_DELETE | IN_ATTRIB | IN_MOVED_TO | IN_MOVED_FROM)
    guard inotify_add_watch(fd, directory, mask) >= 0 else {
      let e = errno
      close(fd)
      throw .unavailable(e)
    }
    self.fd = fd
  }

  deinit { close(fd) }

  /// Whether a node name in the directory could be the key coming back.
  func isCandidate(_ n: String) -> Bool { isVirtual ? n == name : n.hasPrefix("hidraw") }

  /// Waits until the key has gone (its node removed; already gone counts) and a node for it is back and can be
  /// opened. Returns the path of the node that came back (a hidraw key may come back as another hidrawN).
  public func waitForReplug(timeoutSeconds: Double) throws(WaitError) -> String {
    let end = DispatchTime.now().uptimeNanoseconds + UInt64(max(0, timeoutSeconds) * 1e9)
    var removed = !FileManager.default.fileExists(atPath: directory + "/" + name)
    var pending: Set<String> = []  // nodes that appeared but could not be opened yet (udev still at work)
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
      let now = DispatchTime.now().uptimeNanoseconds
      guard now < end else { throw .timedOut(removed: removed) }
      var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
      let ms = Int32(min(UInt64(Int32.max), (end - now + 999_999) / 1_000_000))
      let ready = poll(&pfd, 1, ms)
      if ready < 0 {
        if errno == EINTR { continue }
        throw .unavailable(errno)
      }
      if ready == 0 { continue }
      let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
      if n <= 0 { continue }
      for (node, mask) in InotifyEvents.names(buffer, count: n) {
        guard isCandidate(node) else { continue }
        if mask & UInt32(IN_DELETE | IN_MOVED_FROM) != 0 {
          if node == name { removed = true }
          pending.remove(node)
          continue
        }
        guard removed else { continue }
        if mask & UInt32(IN_CREATE | IN_MOVED_TO | IN_ATTRIB) != 0 {
          let path = directory + "/" + node
          if usable(path) { return path }
          pending.insert(node)
        }
      }
    }
  }

  /// A socket that came back was renamed into place listening; a hidraw node must be readable and writable
  /// by us (udev's uaccess ACL may come a moment after the node: then an IN_ATTRIB follows).
  func usable(_ path: String) -> Bool {
    if isVirtual { return FileManager.default.fileExists(atPath: path) }
    let f = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK)
    guard f >= 0 else { return false }
    close(f)
    return true
  }
}
