import Foundation
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// CTAPHID (CTAP 2.1 §11.2) over a Unix SOCK_SEQPACKET socket: each datagram is one 64-byte HID report
/// (a leading report-ID byte 0 on 65-byte writes is accepted, as hidraw writes carry one).
/// Clients: libfido2 through its custom I/O hooks, python-fido2 through a CtapHidConnection.
public final class CTAPHIDServer: Sendable {
  public let engine: CTAPHIDEngine
  let path: String
  let log: @Sendable (String) -> Void
  /// The open connections, the listening socket, and what `stop` and `replug` (other threads) asked of `run`.
  let sockets = Mutex(Sockets())
  struct Sockets {
    var connections: Set<Int32> = []
    var listener: Int32 = -1
    var stopped = false
    var replugging = false
  }
  /// The threads that serve connections. A client opens the key for each command (a listing: INIT and getInfo), and
  /// a thread made and ended per connection was the largest part of the simulator's CPU in a listing (perf: clone,
  /// stack pages, the exit's unmapping); so a thread whose connection ended waits for the next one. With getInfo
  /// answered on the reading thread (`CTAPHIDEngine.Port`), a four-key listing's simulator CPU went from 0.53-0.57
  /// ms to 0.34-0.37 ms (1,500 listings each, old and new keys side by side); the benchmarks' simulators share
  /// the machine's two CPUs with the client they serve.
  let servers = ParkedThreads()
  /// Log every complete CTAPHID request (`Tools/bench` counts them).
  public var logRequests: Bool {
    get { engine.logRequests }
    set { engine.logRequests = newValue }
  }

  public init(key: VirtualFIDO2Key, path: String, log: @escaping @Sendable (String) -> Void) {
    self.engine = CTAPHIDEngine(key: key, log: log)
    self.path = path
    self.log = log
  }

  /// Unplug and plug back in, as a USB key does: the connections drop, the socket file disappears (unplug),
  /// then a new one is made (plug) and the key powers up: volatile state is lost and the reset window starts.
  /// A client waits for the re-insert by watching the socket's directory (inotify), as for a hidraw node.
  public func replug() {
    sockets.withLock {
      $0.replugging = true
      for c in $0.connections { shutdown(c, Int32(SHUT_RDWR)) }
      if $0.listener >= 0 { shutdown($0.listener, Int32(SHUT_RDWR)) }
    }
  }

  public func stop() {
    sockets.withLock {
      $0.stopped = true
      for c in $0.connections { shutdown(c, Int32(SHUT_RDWR)) }
      if $0.listener >= 0 { shutdown($0.listener, Int32(SHUT_RDWR)) }
    }
  }

  /// Serves until `stop()`; each `replug()` removes the socket file and makes it again.
  public func run() throws {
    var first = true
    while true {
      let s = try listenSocket()
      if !first {
        engine.powerCycle()
        log("replugged (power cycle)")
      }
      first = false
      sockets.withLock { $0.listener = s }
      while !sockets.withLock({ $0.stopped || $0.replugging }) {
        let c = accept(s, nil, nil)
        if c < 0 { continue }
        sockets.withLock { _ = $0.connections.insert(c) }
        // Each open of the device is a connection; like HID, several may be open at once.
        servers.run { [self] in
          serve(c)
          sockets.withLock { _ = $0.connections.remove(c) }
          close(c)
        }
      }
      close(s)
      unlink(path)
      let again = sockets.withLock { sockets in
        sockets.listener = -1
        defer { sockets.replugging = false }
        return !sockets.stopped
      }
      guard again else { return }
      log("unplugged")
      // The connections end before the key comes back (a USB key is off the bus for a moment too); one that
      // lingers (its thread still in a request) never holds the plug-in back for more than a second.
      for _ in 0..<200 where !sockets.withLock({ $0.connections.isEmpty }) { usleep(5_000) }
      usleep(50_000)
    }
  }

  /// Binds and listens under a temporary name, then renames it into place: the socket file appears (one
  /// inotify IN_MOVED_TO) only once it accepts connections.
  func listenSocket() throws -> Int32 {
    let path = self.path + ".new"
    unlink(path)
    unlink(self.path)
    let s = socket(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0)
    guard s >= 0 else { throw POSIXError(.EIO) }
    var addr = sockaddr_un()
    addr.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(path.utf8)
    guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else {
      close(s)
      throw POSIXError(.ENAMETOOLONG)
    }
    withUnsafeMutableBytes(of: &addr.sun_path) { raw in
      for (i, b) in bytes.enumerated() { raw[i] = b }
    }
    let rc = withUnsafePointer(to: &addr) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    guard rc == 0, listen(s, 4) == 0, rename(path, self.path) == 0 else {
      close(s)
      unlink(path)
      throw POSIXError(.EADDRINUSE)
    }
    return s
  }

  func serve(_ c: Int32) {
    let port = engine.openPort { frame in
      _ = frame.withUnsafeBytes { Glibc.send(c, $0.baseAddress, frame.count, Int32(MSG_NOSIGNAL)) }
    }
    defer { port.close() }  // the host went away: a request waiting for a touch on this connection ends now
    var buf = [UInt8](repeating: 0, count: 128)
    while true {
      let n = buf.withUnsafeMutableBytes { recv(c, $0.baseAddress, 128, 0) }
      if n <= 0 { return }
      port.receive(Array(buf[0..<n]))
    }
  }
}

/// Threads that each run one job at a time and, between jobs, wait for the next one instead of ending: a job goes
/// to a waiting thread, or to a new one when all are busy (so jobs never wait for each other).
final class ParkedThreads: Sendable {
  private struct Queue {
    var jobs: [@Sendable () -> Void] = []
    /// Threads between jobs (waiting for `queued`, or woken and not yet past taking a job).
    var waiting = 0
  }

  private let queue = Mutex(Queue())
  /// Signalled once per job queued: each signal lets one thread take one job.
  private let queued = DispatchSemaphore(value: 0)

  func run(_ job: @escaping @Sendable () -> Void) {
    let parked = queue.withLock { q in
      q.jobs.append(job)
      return q.waiting > q.jobs.count - 1
    }
    queued.signal()
    if parked { return }
    Thread { [self] in
      while true {
        queue.withLock { $0.waiting += 1 }
        queued.wait()
        let next = queue.withLock { q in
          q.waiting -= 1
          return q.jobs.removeFirst()
        }
        next()
      }
    }.start()
  }
}
