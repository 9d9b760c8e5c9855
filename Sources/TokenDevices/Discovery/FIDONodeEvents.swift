import Dispatch
import FoundationEssentials
import Platform
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// A FIDO2 key's device node appearing or going: a hidraw node in /dev whose HID report descriptor is FIDO's
/// (usage page 0xF1D0, read from sysfs: the node is not opened), or a virtual key's socket
/// (`TOKENBRIDGE_VIRTUAL_FIDO`: virtual-token removes it at unplug and renames a listening one into place at plug).
public enum FIDONodeEvent: Equatable, Sendable {
  case added(path: String)
  case removed(path: String)
  /// The node's attributes changed (udev set its permissions/ACL after creating it): it may be usable now.
  case changed(path: String)
}

/// inotify on /dev (hidraw nodes) and on the directories of the virtual keys' sockets, on a thread of its own.
/// Make it before looking at what is present (`present`), then `start`: nothing in between is missed.
public final class FIDONodeEvents: Sendable {
  let fd: Int32
  let wake: (read: Int32, write: Int32)
  /// Watch descriptor → directory.
  let directories: [Int32: String]
  let virtualPaths: Set<String>
  let dev: String
  let sys: String
  /// Whether `stop` was called, and whether the event thread runs (`stop` runs on another thread than the loop).
  private let state = Mutex((stopped: false, running: false))
  private let done = DispatchSemaphore(value: 0)
  /// The FIDO nodes present when this was made (the events are about changes from there).
  public let initial: [String]

  /// `virtualPaths`: the virtual keys' sockets (nil: those in `TOKENBRIDGE_VIRTUAL_FIDO`).
  public init(virtualPaths: [String]? = nil, dev: String = "/dev", sys: String = "/sys") {
    self.dev = dev
    self.sys = sys
    let paths = virtualPaths ?? FIDO2Session.namedVirtualKeys()
    let followed = Set(paths)
    self.virtualPaths = followed
    fd = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
    wake = WakePipe.make()
    var directories: [Int32: String] = [:]
    if fd >= 0 {
      let mask = UInt32(IN_CREATE | IN_DELETE | IN_ATTRIB | IN_MOVED_TO | IN_MOVED_FROM)
      for dir in Set([dev] + paths.map(PathString.deletingLast)) {
        let wd = inotify_add_watch(fd, dir, mask)
        if wd >= 0 { directories[wd] = dir }
      }
    }
    self.directories = directories
    initial = fd >= 0 ? Self.present(dev: dev, sys: sys, virtualPaths: followed) : []
  }

  deinit {
    stop()
    if fd >= 0 { close(fd) }
    if wake.read >= 0 {
      close(wake.read)
      close(wake.write)
    }
  }

  /// The FIDO nodes present now.
  public var present: [String] { Self.present(dev: dev, sys: sys, virtualPaths: virtualPaths) }

  static func present(dev: String, sys: String, virtualPaths: Set<String>) -> [String] {
    let hidraw = (Directory.names(dev) ?? []).filter { $0.hasPrefix("hidraw") }
      .filter { isFIDO($0, sys: sys) }.map { "\(dev)/\($0)" }
    return (hidraw + virtualPaths.filter { FileManager.default.fileExists(atPath: $0) }).sorted()
  }

  /// A hidraw node whose report descriptor (sysfs) declares usage page 0xF1D0.
  func isFIDO(_ name: String) -> Bool { Self.isFIDO(name, sys: sys) }

  static func isFIDO(_ name: String, sys: String) -> Bool {
    guard let d = SystemFacts.procFile("\(sys)/class/hidraw/\(name)/device/report_descriptor") else { return false }
    return HIDReportDescriptor.declaresFIDOUsagePage(d)
  }

  /// Whether a node named `name` in `dir` is one we follow.
  func follows(_ dir: String, _ name: String) -> Bool {
    let path = "\(dir)/\(name)"
    if virtualPaths.contains(path) { return true }
    return dir == dev && name.hasPrefix("hidraw")
  }

  public func start(_ handler: @escaping @Sendable (FIDONodeEvent) -> Void) {
    guard fd >= 0 else { return }
    state.withLock { $0.running = true }
    let started = POSIXThread.start { [self] in
      run(handler)
      done.signal()
    }
    if !started { state.withLock { $0.running = false } }  // `stop` must not wait for a thread that never ran
  }

  public func stop() {
    let wasRunning = state.withLock { state -> Bool in
      defer { state = (stopped: true, running: false) }
      return state.running
    }
    if wake.write >= 0 { _ = write(wake.write, "x", 1) }
    if wasRunning { done.wait() }
  }

  /// Waits up to `seconds` for the next events and reports them; false when stopped.
  func run(_ handler: @escaping @Sendable (FIDONodeEvent) -> Void) {
    var buffer = [UInt8](repeating: 0, count: 8192)
    var fido: Set<String> = Set(initial)
    while !state.withLock({ $0.stopped }) {
      var fds = [
        pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0), pollfd(fd: fd, events: Int16(POLLIN), revents: 0),
      ]
      let ready = poll(&fds, 2, -1)
      if ready < 0 && errno == EINTR { continue }
      if ready < 0 || fds[0].revents != 0 { return }
      let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
      if n <= 0 { continue }
      var offset = 0
      while offset + MemoryLayout<inotify_event>.size <= n {
        let (wd, mask, len) = buffer.withUnsafeBytes { raw in
          let ev = raw.loadUnaligned(fromByteOffset: offset, as: inotify_event.self)
          return (ev.wd, ev.mask, Int(ev.len))
        }
        let nameStart = offset + MemoryLayout<inotify_event>.size
        let name = String(decoding: buffer[nameStart..<min(n, nameStart + len)].prefix { $0 != 0 }, as: UTF8.self)
        offset = nameStart + len
        guard let dir = directories[wd], follows(dir, name) else { continue }
        let path = "\(dir)/\(name)"
        if mask & UInt32(IN_DELETE | IN_MOVED_FROM) != 0 {
          if fido.remove(path) != nil { handler(.removed(path: path)) }
        } else if mask & UInt32(IN_CREATE | IN_MOVED_TO) != 0 {
          guard virtualPaths.contains(path) || isFIDO(name) else { continue }
          if fido.insert(path).inserted { handler(.added(path: path)) }
        } else if mask & UInt32(IN_ATTRIB) != 0, fido.contains(path) {
          handler(.changed(path: path))
        }
      }
    }
  }
}
