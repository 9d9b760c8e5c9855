import Foundation
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// Queues data for an IN endpoint (number without the direction bit) of the attached device.
public typealias USBInQueue = @Sendable (_ endpoint: UInt8, _ data: [UInt8]) -> Void

/// The FIDO HID interface: CTAPHID reports on interrupt OUT/IN endpoint 1, and the key behind them: the built-in
/// virtual key (an engine), or an external key reached on its key socket (a Unix SOCK_SEQPACKET socket, one datagram
/// = one 64-byte report, as `virtual-token fido2 --socket` serves one): every report goes there unchanged and every
/// report it sends comes back on the IN endpoint, so the guest talks to firmware we did not write.
/// Each attach is a power-up: new channels, new key agreement key, the reset window starts (built-in), or a new
/// connection to the key socket (external: a key whose socket is not there cannot be attached). When the external
/// key drops the connection (it was replugged or stopped), the USB device is unplugged: the guest sees it go.
public final class FIDOHIDFunction: Sendable {
  public enum Key: Sendable {
    case builtIn(CTAPHIDEngine)
    case external(socket: String)
  }

  static let endpoint: UInt8 = 1
  static let reportSize = 64
  public let key: Key
  let log: @Sendable (String) -> Void
  /// What an attach set up (`attach`, `output` and `detach` come from the URB reader; the key's reports from the
  /// key's threads).
  let attached = Mutex(Attached())

  struct Attached {
    var port: CTAPHIDEngine.Port?
    var link: ExternalKeyLink?
    /// The lab's pull sweep (nil: off); `unplug` takes the device off the bus, `muted` drops what the key still says.
    var pullSwitch: PullSwitch?
    var unplug: (@Sendable () -> Void)?
    var muted = false
  }

  /// The lab's pull sweep (see `PullSwitch`); set before serving.
  var pullSwitch: PullSwitch? {
    get { attached.withLock { $0.pullSwitch } }
    set { attached.withLock { $0.pullSwitch = newValue } }
  }

  public init(engine: CTAPHIDEngine) {
    key = .builtIn(engine)
    log = { _ in }
  }

  public init(externalSocket path: String, log: @escaping @Sendable (String) -> Void) {
    key = .external(socket: path)
    self.log = log
  }

  /// False when the key cannot be powered up (an external key whose socket does not answer).
  func attach(_ queue: @escaping USBInQueue, unplug: @escaping @Sendable () -> Void) -> Bool {
    attached.withLock {
      $0.unplug = unplug
      $0.muted = false
    }
    switch key {
    case .builtIn(let engine):
      engine.powerCycle()
      let port = engine.openPort { [self] report in
        if !attached.withLock({ $0.muted }) { queue(Self.endpoint, report) }
      }
      attached.withLock { $0.port = port }
      return true
    case .external(let path):
      guard let link = ExternalKeyLink(path: path, log: log) else { return false }
      attached.withLock { $0.link = link }
      let log = self.log
      link.start(
        report: { [self] report in if !attached.withLock({ $0.muted }) { queue(Self.endpoint, report) } },
        dropped: {
          log("the external key at \(path) closed the connection (replugged or stopped): unplugged")
          unplug()
        })
      return true
    }
  }

  func detach() {
    let (port, link) = attached.withLock { a in
      defer {
        a.port = nil
        a.link = nil
      }
      return (a.port, a.link)
    }
    port?.close()
    link?.close()
  }

  /// One output report (interrupt OUT transfer or SET_REPORT).
  func output(_ report: [UInt8]) {
    let (port, link, pull) = attached.withLock { ($0.port, $0.link, $0.pullSwitch) }
    if let pull, let mode = pull.request(PullSwitch.describeReport(report)) {
      // Pulled at this report: the key hears it or not (mode), and nothing it answers reaches the host.
      let unplug = attached.withLock {
        $0.muted = true
        return $0.unplug
      }
      if mode == .processed {
        port?.receive(report)
        port?.worker.sync {}  // a request that completes here has run to its end
        link?.send(report)
      }
      unplug?()
      return
    }
    port?.receive(report)
    link?.send(report)
  }
}

/// One connection to an external key's socket, for one attach: a thread reads the key's reports until the key or
/// `close()` ends the connection.
final class ExternalKeyLink: Sendable {
  let fd: Int32
  /// Whether the reading thread was started, and whether `close` is ending the connection (not the key).
  let state = Mutex((started: false, closing: false))
  let finished = DispatchSemaphore(value: 0)

  init?(path: String, log: (String) -> Void) {
    let s = socket(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0)
    guard s >= 0 else { return nil }
    var addr = sockaddr_un()
    addr.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(path.utf8)
    guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else {
      Glibc.close(s)
      log("the external key's socket path is too long: \(path)")
      return nil
    }
    withUnsafeMutableBytes(of: &addr.sun_path) { raw in
      for (i, b) in bytes.enumerated() { raw[i] = b }
    }
    let rc = withUnsafePointer(to: &addr) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(s, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    guard rc == 0 else {
      let reason = String(cString: strerror(errno))
      Glibc.close(s)
      log("no external key at \(path) (\(reason)): not attached")
      return nil
    }
    fd = s
  }

  func start(report: @escaping @Sendable ([UInt8]) -> Void, dropped: @escaping @Sendable () -> Void) {
    state.withLock { $0.started = true }
    let fd = self.fd
    Thread { [self] in
      var buf = [UInt8](repeating: 0, count: 128)
      while true {
        let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, 128, 0) }
        if n <= 0 { break }
        report(Self.report(Array(buf[0..<n])))
      }
      if !state.withLock({ $0.closing }) { dropped() }
      finished.signal()
    }.start()
  }

  /// Exactly one 64-byte report: a hidraw-style leading report ID 0 (65 bytes) is dropped, a short one padded.
  static func report(_ data: [UInt8]) -> [UInt8] {
    let body = data.count == FIDOHIDFunction.reportSize + 1 && data[0] == 0 ? Array(data.dropFirst()) : data
    return Array(body.prefix(FIDOHIDFunction.reportSize))
      + [UInt8](repeating: 0, count: max(0, FIDOHIDFunction.reportSize - body.count))
  }

  func send(_ data: [UInt8]) {
    let report = Self.report(data)
    _ = report.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, report.count, Int32(MSG_NOSIGNAL)) }
  }

  /// Ends the connection and waits for the reading thread (no report is delivered after this returns).
  func close() {
    let wait = state.withLock {
      $0.closing = true
      return $0.started
    }
    shutdown(fd, Int32(SHUT_RDWR))
    if wait { finished.wait() }
    Glibc.close(fd)
  }
}
