import Foundation

#if canImport(Glibc)
  import Glibc
#endif

/// CTAPHID (CTAP 2.1 §11.2) over a Unix SOCK_SEQPACKET socket: each datagram is one 64-byte HID report
/// (a leading report-ID byte 0 on 65-byte writes is accepted, as hidraw writes carry one).
/// Clients: libfido2 through its custom I/O hooks, python-fido2 through a CtapHidConnection.
public final class CTAPHIDServer: @unchecked Sendable {
  static let broadcast: UInt32 = 0xFFFF_FFFF
  let key: VirtualFIDO2Key
  let path: String
  let log: (String) -> Void
  let lock = NSLock()
  var channels: Set<UInt32> = []
  var nextCID: UInt32 = 1
  var connections: Set<Int32> = []
  var listener: Int32 = -1
  /// One request at a time across all connections (a real key has one processor).
  let busy = NSLock()
  /// Frames of one message never interleave with another's (reader and worker both send).
  let sendLock = NSLock()
  var stopped = false
  var replugging = false
  /// Log every complete CTAPHID request (`Tools/bench` counts them).
  public var logRequests = false

  public init(key: VirtualFIDO2Key, path: String, log: @escaping (String) -> Void) {
    self.key = key
    self.path = path
    self.log = log
  }

  /// Unplug and plug back in, as a USB key does: the connections drop, the socket file disappears (unplug),
  /// then a new one is made (plug) and the key powers up: volatile state is lost and the reset window starts.
  /// A client waits for the re-insert by watching the socket's directory (inotify), as for a hidraw node.
  public func replug() {
    lock.withLock {
      replugging = true
      for c in connections { shutdown(c, Int32(SHUT_RDWR)) }
      if listener >= 0 { shutdown(listener, Int32(SHUT_RDWR)) }
    }
  }

  public func stop() {
    lock.withLock {
      stopped = true
      for c in connections { shutdown(c, Int32(SHUT_RDWR)) }
      if listener >= 0 { shutdown(listener, Int32(SHUT_RDWR)) }
    }
  }

  /// Serves until `stop()`; each `replug()` removes the socket file and makes it again.
  public func run() throws {
    var first = true
    while true {
      let s = try listenSocket()
      if !first {
        busy.withLock {
          lock.withLock {
            key.powerCycle()
            channels = []
          }
        }
        log("replugged (power cycle)")
      }
      first = false
      lock.withLock { listener = s }
      while !lock.withLock({ stopped || replugging }) {
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
      let again = lock.withLock {
        listener = -1
        defer { replugging = false }
        return !stopped
      }
      guard again else { return }
      log("unplugged")
      // The connections end before the key comes back (a USB key is off the bus for a moment too); one that
      // lingers (its thread still in a request) never holds the plug-in back for more than a second.
      for _ in 0..<200 where !lock.withLock({ connections.isEmpty }) { usleep(5_000) }
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
    let worker = DispatchQueue(label: "ctaphid-worker-\(c)")
    defer {
      key.cancel()  // the host went away: a request waiting for a touch on this connection ends now
      worker.sync {}
    }
    var buf = [UInt8](repeating: 0, count: 128)
    var pending: (cid: UInt32, cmd: UInt8, total: Int, data: [UInt8], seq: UInt8)?
    while true {
      let n = buf.withUnsafeMutableBytes { recv(c, $0.baseAddress, 128, 0) }
      if n <= 0 { return }
      var frame = Array(buf[0..<n])
      if frame.count == 65 && frame[0] == 0 { frame.removeFirst() }
      guard frame.count == 64 else { continue }
      let cid = UInt32(frame[0]) << 24 | UInt32(frame[1]) << 16 | UInt32(frame[2]) << 8 | UInt32(frame[3])
      if frame[4] & 0x80 != 0 {
        let cmd = frame[4]
        let total = Int(frame[5]) << 8 | Int(frame[6])
        if cmd == 0x91 {  // CANCEL: no reply; a request waiting for a touch ends with KEEPALIVE_CANCEL
          key.cancel()
          continue
        }
        guard total <= 7609 else {
          sendError(c, cid, 0x03)
          continue
        }
        pending = (cid, cmd, total, Array(frame[7..<min(64, 7 + total)]), 0)
      } else {
        guard var p = pending, p.cid == cid, frame[4] == p.seq else {
          sendError(c, cid, 0x04)  // INVALID_SEQ
          pending = nil
          continue
        }
        p.data += frame[5..<min(64, 5 + p.total - p.data.count)]
        p.seq += 1
        pending = p
      }
      if let p = pending, p.data.count >= p.total {
        pending = nil
        // CBOR requests run on a worker, so CANCEL frames are still read while one waits for a touch.
        if p.cmd == 0x90 {
          worker.async { [self] in handle(c, p.cid, p.cmd, p.data) }
        } else {
          handle(c, p.cid, p.cmd, p.data)
        }
      }
    }
  }

  func handle(_ c: Int32, _ cid: UInt32, _ cmd: UInt8, _ data: [UInt8]) {
    if logRequests {
      let sub = cmd == 0x90 ? String(format: " ctap=0x%02x", data.first ?? 0) : ""
      log(String(format: "request cmd=0x%02x", cmd) + sub)
    }
    if cmd == 0x86 {  // INIT
      guard data.count == 8 else { return sendError(c, cid, 0x03) }
      var newCID = cid
      if cid == Self.broadcast {
        newCID = lock.withLock {
          let n = nextCID
          nextCID = nextCID &+ 1 == Self.broadcast ? 1 : nextCID &+ 1
          channels.insert(n)
          return n
        }
      }
      let body = data + bigEndian(newCID) + [2, 0, 2, 1, 0x01 | 0x04 | 0x08]  // WINK|CBOR|NMSG
      return send(c, cid, 0x86, body)
    }
    guard cid != Self.broadcast, cid != 0, lock.withLock({ channels.contains(cid) }) else {
      return sendError(c, cid, 0x0B)  // INVALID_CHANNEL
    }
    switch cmd {
    case 0x81: send(c, cid, 0x81, data)  // PING
    case 0x88: send(c, cid, 0x88, [])  // WINK
    case 0x90:  // CBOR
      let reply = busy.withLock {
        key.waitingForTouch = { [weak self] in self?.send(c, cid, 0xBB, [2]) }  // KEEPALIVE UP_NEEDED
        defer { key.waitingForTouch = nil }
        return key.handle(data)
      }
      send(c, cid, 0x90, reply)
    default: sendError(c, cid, 0x01)  // INVALID_CMD (MSG too: no U2F, NMSG is set)
    }
  }

  func sendError(_ c: Int32, _ cid: UInt32, _ code: UInt8) { send(c, cid, 0xBF, [code]) }

  /// Splits a reply into an init frame (57 bytes of data) and continuation frames (59 each), zero padded.
  func send(_ c: Int32, _ cid: UInt32, _ cmd: UInt8, _ data: [UInt8]) {
    sendLock.lock()
    defer { sendLock.unlock() }
    let cidBytes = bigEndian(cid)
    var frames: [[UInt8]] = [cidBytes + [cmd, UInt8(data.count >> 8), UInt8(data.count & 0xFF)] + data.prefix(57)]
    var offset = min(57, data.count)
    var seq: UInt8 = 0
    while offset < data.count {
      let chunk = data[offset..<min(offset + 59, data.count)]
      frames.append(cidBytes + [seq] + chunk)
      offset += chunk.count
      seq += 1
    }
    for var f in frames {
      f += [UInt8](repeating: 0, count: 64 - f.count)
      _ = f.withUnsafeBytes { Glibc.send(c, $0.baseAddress, 64, Int32(MSG_NOSIGNAL)) }
    }
  }
}
