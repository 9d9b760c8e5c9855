import Foundation

#if canImport(Glibc)
  import Glibc
#endif

/// CTAPHID (CTAP 2.1 §11.2) over a Unix SOCK_SEQPACKET socket: each datagram is one 64-byte HID report
/// (a leading report-ID byte 0 on 65-byte writes is accepted, as hidraw writes carry one).
/// Clients: libfido2 through its custom I/O hooks, python-fido2 through a CtapHidConnection.
public final class CTAPHIDServer: @unchecked Sendable {
  public let engine: CTAPHIDEngine
  let path: String
  let log: (String) -> Void
  let lock = NSLock()
  var connections: Set<Int32> = []
  var listener: Int32 = -1
  var stopped = false
  /// Log every complete CTAPHID request (`Tools/bench` counts them).
  public var logRequests: Bool {
    get { engine.logRequests }
    set { engine.logRequests = newValue }
  }

  public init(key: VirtualFIDO2Key, path: String, log: @escaping (String) -> Void) {
    self.engine = CTAPHIDEngine(key: key, log: log)
    self.path = path
    self.log = log
  }

  /// Unplug and plug back in: the connection drops, volatile state is lost (power cycle).
  public func replug() {
    engine.powerCycle {
      lock.withLock {
        for c in connections { shutdown(c, Int32(SHUT_RDWR)) }
      }
    }
    log("replugged (power cycle)")
  }

  public func stop() {
    lock.withLock {
      stopped = true
      for c in connections { shutdown(c, Int32(SHUT_RDWR)) }
      if listener >= 0 { shutdown(listener, Int32(SHUT_RDWR)) }
    }
  }

  public func run() throws {
    unlink(path)
    let s = socket(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0)
    guard s >= 0 else { throw POSIXError(.EIO) }
    var addr = sockaddr_un()
    addr.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(path.utf8)
    guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else { throw POSIXError(.ENAMETOOLONG) }
    withUnsafeMutableBytes(of: &addr.sun_path) { raw in
      for (i, b) in bytes.enumerated() { raw[i] = b }
    }
    let rc = withUnsafePointer(to: &addr) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    guard rc == 0, listen(s, 4) == 0 else { throw POSIXError(.EADDRINUSE) }
    lock.withLock { listener = s }
    while !lock.withLock({ stopped }) {
      let c = accept(s, nil, nil)
      if c < 0 { continue }
      lock.withLock { _ = connections.insert(c) }
      // Each open of the device is a connection; like HID, several may be open at once.
      Thread { [self] in
        serve(c)
        lock.withLock { _ = connections.remove(c) }
        close(c)
      }.start()
    }
    close(s)
    unlink(path)
  }

  func serve(_ c: Int32) {
    let port = engine.openPort { frame in
      _ = frame.withUnsafeBytes { Glibc.send(c, $0.baseAddress, frame.count, Int32(MSG_NOSIGNAL)) }
    }
    defer { port.close() }
    var buf = [UInt8](repeating: 0, count: 128)
    while true {
      let n = buf.withUnsafeMutableBytes { recv(c, $0.baseAddress, 128, 0) }
      if n <= 0 { return }
      port.receive(Array(buf[0..<n]))
    }
  }
}
