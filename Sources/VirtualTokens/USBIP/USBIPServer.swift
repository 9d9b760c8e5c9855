import Foundation
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// The device side of the USB/IP protocol (Linux Documentation/usb/usbip_protocol.rst, version 0x0111) on a
/// TCP socket: OP_REQ_DEVLIST, OP_REQ_IMPORT, then CMD_SUBMIT / CMD_UNLINK for the imported device until the
/// host detaches (closes the connection). Device N is bus id "1-N". Loopback addresses only.
public final class USBIPServer: Sendable {
  public let devices: [VirtualUSBDevice]
  let log: @Sendable (String) -> Void
  /// The devices imported and their connections, the listening socket, whether `stop` was called (each connection
  /// is served by a thread of its own; `stop` and `unplugAll` come from others).
  let state = Mutex(State())

  struct State {
    var imported: Set<Int> = []
    var sessions: [Int: Int32] = [:]
    var listener: Int32 = -1
    var stopped = false
  }

  public init(devices: [VirtualUSBDevice], log: @escaping @Sendable (String) -> Void) {
    self.devices = devices
    self.log = log
  }

  static let version: UInt16 = 0x0111

  public static func busID(_ index: Int) -> String { "1-\(index + 1)" }

  /// Parses HOST:PORT / [V6]:PORT; only 127.0.0.0/8 and ::1 (the lab addresses nothing else).
  public static func loopbackAddress(_ text: String) -> (family: Int32, address: [UInt8], port: UInt16)? {
    guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]) else {
      return nil
    }
    var host = String(text[..<colon])
    if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
    if host == "localhost" { host = "127.0.0.1" }
    var v4 = in_addr()
    if inet_pton(AF_INET, host, &v4) == 1 {
      let bytes = withUnsafeBytes(of: &v4) { Array($0) }
      return bytes[0] == 127 ? (AF_INET, bytes, port) : nil
    }
    var v6 = in6_addr()
    if inet_pton(AF_INET6, host, &v6) == 1 {
      let bytes = withUnsafeBytes(of: &v6) { Array($0) }
      return bytes == [UInt8](repeating: 0, count: 15) + [1] ? (AF_INET6, bytes, port) : nil
    }
    return nil
  }

  public func stop() {
    state.withLock {
      $0.stopped = true
      if $0.listener >= 0 { shutdown($0.listener, Int32(SHUT_RDWR)) }
      for (_, fd) in $0.sessions { shutdown(fd, Int32(SHUT_RDWR)) }
    }
  }

  /// Unplugs every attached device from the server side (the host sees the connection close).
  public func unplugAll() {
    state.withLock {
      for (_, fd) in $0.sessions { shutdown(fd, Int32(SHUT_RDWR)) }
    }
  }

  public func run(listen address: (family: Int32, address: [UInt8], port: UInt16), ready: () -> Void = {}) throws {
    let s = socket(address.family, Int32(SOCK_STREAM.rawValue), 0)
    guard s >= 0 else { throw POSIXError(.EIO) }
    var one: Int32 = 1
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
    let rc: Int32
    if address.family == AF_INET {
      var a = sockaddr_in()
      a.sin_family = sa_family_t(AF_INET)
      a.sin_port = address.port.bigEndian
      withUnsafeMutableBytes(of: &a.sin_addr) { $0.copyBytes(from: address.address) }
      rc = withUnsafePointer(to: &a) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
      }
    } else {
      var a = sockaddr_in6()
      a.sin6_family = sa_family_t(AF_INET6)
      a.sin6_port = address.port.bigEndian
      withUnsafeMutableBytes(of: &a.sin6_addr) { $0.copyBytes(from: address.address) }
      rc = withUnsafePointer(to: &a) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
      }
    }
    guard rc == 0, listen(s, 8) == 0 else {
      close(s)
      throw POSIXError(.EADDRINUSE)
    }
    state.withLock { $0.listener = s }
    ready()
    while !state.withLock({ $0.stopped }) {
      let c = accept(s, nil, nil)
      if c < 0 { continue }
      setsockopt(c, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
      Thread { [self] in
        serve(c)
        close(c)
      }.start()
    }
    close(s)
  }

  // MARK: operations before import

  func serve(_ c: Int32) {
    guard let op = socketRead(c, 8) else { return }
    let version = UInt16(op[0]) << 8 | UInt16(op[1])
    let code = UInt16(op[2]) << 8 | UInt16(op[3])
    guard version == Self.version else { return log(String(format: "USB/IP version %04x refused", version)) }
    switch code {
    case 0x8005:  // OP_REQ_DEVLIST
      var reply = be16(Self.version) + be16(0x0005) + be32(0) + be32(UInt32(devices.count))
      for (i, d) in devices.enumerated() {
        reply += deviceBlock(i)
        for (cls, sub, proto) in d.interfaceClasses { reply += [cls, sub, proto, 0] }
      }
      _ = socketSend(c, reply)
    case 0x8003:  // OP_REQ_IMPORT
      guard let raw = socketRead(c, 32) else { return }
      let busID = String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
      guard let i = devices.indices.first(where: { Self.busID($0) == busID }),
        state.withLock({ $0.imported.insert(i).inserted })
      else {
        log("import of \(busID) refused (unknown or already attached)")
        _ = socketSend(c, be16(Self.version) + be16(0x0003) + be32(1))
        return
      }
      defer { state.withLock { _ = $0.imported.remove(i) } }
      let session = URBSession(fd: c, device: devices[i], log: log)
      guard session.attach() else {  // its external key is not there: as if the device were not plugged in
        _ = socketSend(c, be16(Self.version) + be16(0x0003) + be32(1))
        return
      }
      defer { devices[i].detach() }
      guard socketSend(c, be16(Self.version) + be16(0x0003) + be32(0) + deviceBlock(i)) else { return }
      log("\(busID) attached (\(devices[i].kind.rawValue), serial \(devices[i].serial))")
      state.withLock { $0.sessions[i] = c }
      session.run()
      state.withLock { _ = $0.sessions.removeValue(forKey: i) }
      log("\(busID) detached")
    default: log(String(format: "USB/IP operation %04x refused", code))
    }
  }

  func deviceBlock(_ i: Int) -> [UInt8] {
    let d = devices[i]
    let bus = Self.busID(i)
    var path = Array("/sys/devices/platform/virtual-token/usb1/\(bus)".utf8)
    path += [UInt8](repeating: 0, count: 256 - path.count)
    let busBytes = Array(bus.utf8) + [UInt8](repeating: 0, count: 32 - bus.utf8.count)
    return path + busBytes + be32(1) + be32(UInt32(i + 2)) + be32(2)  // busnum, devnum, speed (full)
      + be16(USBDescriptors.vendorID) + be16(USBDescriptors.productID) + be16(USBDescriptors.bcdDevice)
      + [0, 0, 0, 1, 1, UInt8(d.interfaceClasses.count)]
  }
}

/// One imported device: URBs in, RET_SUBMIT / RET_UNLINK out. IN URBs on interrupt and bulk endpoints are
/// parked until the device has data for them (usbhid and libccid keep one outstanding and unlink it on close
/// or timeout); data queued before a URB arrives waits for one.
final class URBSession: Sendable {
  let fd: Int32
  let device: VirtualUSBDevice
  let log: @Sendable (String) -> Void
  /// By IN endpoint: URBs waiting for data, and data waiting for a URB (the URB reader parks and unlinks; the
  /// device's functions queue from their own threads).
  let endpoints = Mutex(Endpoints())
  /// One message at a time on the connection.
  let sending = Mutex(())

  struct Endpoints {
    var parked: [UInt8: [(seq: UInt32, length: Int)]] = [:]
    var ready: [UInt8: [[UInt8]]] = [:]
  }

  init(fd: Int32, device: VirtualUSBDevice, log: @escaping @Sendable (String) -> Void) {
    self.fd = fd
    self.device = device
    self.log = log
  }

  /// Powers the device up (before the import is answered); false when it cannot be.
  func attach() -> Bool {
    let fd = self.fd
    return device.attach(
      { [weak self] endpoint, data in self?.queueIn(endpoint, data) },
      unplug: { shutdown(fd, Int32(SHUT_RDWR)) })  // run() sees the end of the connection, then detaches
  }

  /// Serves URBs until the host detaches or the device is unplugged; the caller detaches the device.
  func run() {
    while let header = socketRead(fd, 48) {
      let command = be32(header, 0)
      let seq = be32(header, 4)
      switch command {
      case 1:  // CMD_SUBMIT
        let directionIn = be32(header, 12) == 1
        let endpoint = UInt8(truncatingIfNeeded: be32(header, 16))
        let length = Int(Int32(bitPattern: be32(header, 24)))
        guard length >= 0, length <= 1 << 20 else { return log("URB of \(length) bytes: connection closed") }
        var data: [UInt8] = []
        if !directionIn && length > 0 {
          guard let d = socketRead(fd, length) else { return }
          data = d
        }
        submit(seq, endpoint: endpoint, directionIn: directionIn, length: length, setup: Array(header[40..<48]), data)
      case 2:  // CMD_UNLINK
        let target = be32(header, 20)
        let found = endpoints.withLock { e in
          for (ep, urbs) in e.parked {
            if let k = urbs.firstIndex(where: { $0.seq == target }) {
              e.parked[ep]!.remove(at: k)
              return true
            }
          }
          return false
        }
        // -ECONNRESET when the URB was still parked (its RET_SUBMIT is never sent), 0 when already answered.
        send(retUnlink(seq, status: found ? -104 : 0))
      default: return log("USB/IP command \(command) unknown: connection closed")
      }
    }
  }

  func submit(_ seq: UInt32, endpoint: UInt8, directionIn: Bool, length: Int, setup: [UInt8], _ data: [UInt8]) {
    if endpoint == 0 {
      switch device.control(setup: setup, data: data) {
      case .stall: send(retSubmit(seq, status: -32, length: 0))  // -EPIPE
      case .data(let d): send(retSubmit(seq, status: 0, length: directionIn ? d.count : data.count) + d)
      }
      return
    }
    if !directionIn {
      device.output(endpoint: endpoint, data)
      return send(retSubmit(seq, status: 0, length: data.count))
    }
    let reply: [UInt8]? = endpoints.withLock { e in
      guard var queue = e.ready[endpoint], !queue.isEmpty else {
        e.parked[endpoint, default: []].append((seq, length))
        return nil
      }
      let chunk = take(&queue, length, endpoint: endpoint)
      e.ready[endpoint] = queue
      return retSubmit(seq, status: 0, length: chunk.count) + chunk
    }
    if let reply { send(reply) }
  }

  /// Data for an IN endpoint: to the oldest parked URB, or queued.
  func queueIn(_ endpoint: UInt8, _ data: [UInt8]) {
    let reply: [UInt8]? = endpoints.withLock { e in
      var queue = e.ready[endpoint, default: []]
      queue.append(data)
      guard var urbs = e.parked[endpoint], !urbs.isEmpty else {
        e.ready[endpoint] = queue
        return nil
      }
      let urb = urbs.removeFirst()
      e.parked[endpoint] = urbs
      let chunk = take(&queue, urb.length, endpoint: endpoint)
      e.ready[endpoint] = queue
      return retSubmit(urb.seq, status: 0, length: chunk.count) + chunk
    }
    if let reply { send(reply) }
  }

  /// The first queued transfer, cut to the URB's length; on the bulk endpoint the rest stays for the next URB
  /// (a stream), on interrupt endpoints (whole reports) nothing longer than a report is ever queued.
  func take(_ queue: inout [[UInt8]], _ length: Int, endpoint: UInt8) -> [UInt8] {
    let first = queue.removeFirst()
    guard first.count > length else { return first }
    if endpoint == CCIDFunction.bulkIn { queue.insert(Array(first[length...]), at: 0) }
    return Array(first.prefix(length))
  }

  func send(_ bytes: [UInt8]) {
    sending.withLock { _ in _ = socketSend(fd, bytes) }
  }

  func retSubmit(_ seq: UInt32, status: Int32, length: Int) -> [UInt8] {
    be32(3) + be32(seq) + be32(0) + be32(0) + be32(0) + be32(UInt32(bitPattern: status)) + be32(UInt32(length))
      + be32(0) + be32(0) + be32(0) + [UInt8](repeating: 0, count: 8)
  }

  func retUnlink(_ seq: UInt32, status: Int32) -> [UInt8] {
    be32(4) + be32(seq) + be32(0) + be32(0) + be32(0) + be32(UInt32(bitPattern: status))
      + [UInt8](repeating: 0, count: 24)
  }
}

func be16(_ v: UInt16) -> [UInt8] { [UInt8(v >> 8), UInt8(v & 0xFF)] }
func be32(_ v: UInt32) -> [UInt8] { bigEndian(v) }
func be32(_ b: [UInt8], _ at: Int) -> UInt32 {
  UInt32(b[at]) << 24 | UInt32(b[at + 1]) << 16 | UInt32(b[at + 2]) << 8 | UInt32(b[at + 3])
}
