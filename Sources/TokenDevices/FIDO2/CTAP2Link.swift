import CFido2
import Dispatch
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// One CTAPHID channel to a key, spoken by TokenBridge itself and synchronously (CTAP 2.1 §11.2): what a
/// `FIDO2Session` uses until a call needs libfido2. It carries the requests whose every byte TokenBridge decides:
/// getInfo, the PIN tries, the PIN protocol and getAssertion with hmac-secret (`FIDO2Session+OwnCTAP`).
///
/// Why: libfido2 sends getInfo whenever it opens a key (dev.c `fido_dev_open_rx`), so a command that reads the PIN
/// tries before the PIN (the house rule) could not get below INIT + 5 requests for an assertion; this channel
/// sends getInfo only when a caller asks for it (issue 12, HardwareNotes.md "PIN protocol of our own").
///
/// The transports are those of the custom I/O and of `CTAPHIDChannel`: a virtual key's SOCK_SEQPACKET socket (one
/// datagram = one 64-byte report), or a hidraw node opened and locked as libfido2 opens it (65-byte writes,
/// report ID 0 first; 64-byte reads).
///
/// `@unchecked Sendable`: only `cancel()` is called from another thread, and it reads nothing but `running` (behind
/// its lock) and the constant `ref`.
final class CTAP2Link: @unchecked Sendable {
  let ref: FIDO2DeviceRef
  private(set) var fd: Int32 = -1
  private(set) var channel = FIDO2IO.CTAPHID.broadcast
  /// CTAPHID_INIT's capability flags; CAPFLAG_CBOR (0x04): it speaks CTAP2.
  private(set) var capabilities: UInt8 = 0
  /// The descriptor and channel a CANCEL goes to, for `cancel()` from another thread (0: nothing runs).
  private let running = Mutex<(fd: Int32, channel: UInt32)>((-1, 0))

  /// Opens the transport within `ms` (a hidraw lock another process holds is waited for) and sends CTAPHID_INIT.
  init(_ ref: FIDO2DeviceRef, ms: Int32, sys: String = "/sys") throws(TokenError) {
    self.ref = ref
    if ref.isVirtual {
      guard let s = VirtualFIDOIO.connectSocket(ref.path, deadlineMs: ms) else {
        throw CTAPHIDChannel.openError(errno, ref)
      }
      fd = s
    } else {
      if let refusal = FIDO2Session.reportLengthRefusal(ref.path, sys: sys) { throw refusal }
      let context = FIDO2IO.Context(readDeadlineMs: ms)
      guard let d = HidrawFIDOIO.openLocked(ref.path, context: context) else {
        if context.timedOut { throw .noAnswer(operation: "open") }
        throw context.peerGone
          ? .smartCard(.cardRemoved(reader: ref.path)) : .fido2(FIDO_ERR_INTERNAL, operation: "open")
      }
      fd = d
    }
    do throws(TokenError) {
      var random = SystemRandomNumberGenerator()
      let nonce = withUnsafeBytes(of: random.next() as UInt64) { Array($0) }
      // Answers to another process's INIT on the broadcast channel carry its nonce: passed over (read on, within
      // the same deadline; nothing is sent again).
      let end = Self.end(ms)
      try send(FIDO2IO.CTAPHID.initialize, nonce, operation: "open")
      var answer: [UInt8]
      repeat {
        answer = try receive(FIDO2IO.CTAPHID.initialize, operation: "open", until: end)
      } while answer.count >= 8 && Array(answer[0..<8]) != nonce
      // nonce (8), channel (4), CTAPHID protocol version, major, minor, build, capabilities (§11.2.9.1.3)
      guard answer.count >= 17 else { throw .malformedResponse(operation: "open") }
      channel = Array(answer[8..<12])
      capabilities = answer[16]
      guard capabilities & 0x04 != 0 else {
        throw .unsupported("FIDO2 (CTAP2): it answered CTAPHID_INIT as a U2F-only key")
      }
    } catch {
      close()
      throw error
    }
  }

  deinit { close() }

  /// Closing the descriptor ends the channel (and releases a hidraw node's lock).
  func close() {
    guard fd >= 0 else { return }
    running.withLock { $0 = (-1, 0) }
    Glibc.close(fd)
    fd = -1
  }

  var isOpen: Bool { fd >= 0 }

  /// One CTAP2 request (CTAPHID_CBOR): the status byte and the CBOR after it. `touchCue` fires once when the key
  /// sends KEEPALIVE UP_NEEDED. Bounded by `ms` in all (a key that keeps sending KEEPALIVE does not extend it).
  func cbor(_ request: [UInt8], operation: String, ms: Int32, touchCue: (() -> Void)? = nil) throws(TokenError)
    -> (status: UInt8, body: [UInt8])
  {
    let m = try transact(FIDO2IO.CTAPHID.cbor, request, operation: operation, ms: ms, touchCue: touchCue)
    guard let status = m.first else { throw .malformedResponse(operation: operation) }
    return (status, Array(m.dropFirst()))
  }

  /// Sends CTAPHID_CANCEL for the request that runs, if one does (another thread: Ctrl-C, a touch deadline). The
  /// key answers that request with KEEPALIVE_CANCEL (0x2D).
  @discardableResult
  func cancel() -> Bool {
    running.withLock { r in
      guard r.fd >= 0 else { return false }
      let ch = withUnsafeBytes(of: r.channel.bigEndian) { Array($0) }
      _ = Self.write(r.fd, virtual: ref.isVirtual, Self.packet(ch, FIDO2IO.CTAPHID.cancel, length: 0, data: []))
      return true
    }
  }

  /// A request of any length in an initialization packet and continuation packets, then the answer's packets
  /// reassembled (other channels' reports and KEEPALIVE passed over).
  func transact(_ command: UInt8, _ payload: [UInt8], operation: String, ms: Int32, touchCue: (() -> Void)? = nil)
    throws(TokenError) -> [UInt8]
  {
    let end = Self.end(ms)
    try send(command, payload, operation: operation)
    return try receive(command, operation: operation, until: end, touchCue: touchCue)
  }

  /// When a call of `ms` milliseconds started now ends (uptime nanoseconds).
  static func end(_ ms: Int32) -> UInt64 { DispatchTime.now().uptimeNanoseconds + UInt64(max(1, ms)) * 1_000_000 }

  /// Writes a request: an initialization packet and the continuation packets its length needs.
  func send(_ command: UInt8, _ payload: [UInt8], operation: String) throws(TokenError) {
    guard fd >= 0 else { throw .smartCard(.cardRemoved(reader: ref.path)) }
    guard payload.count <= 7609 else { throw .unsupported("a request of \(payload.count) bytes (CTAPHID: 7609)") }
    var packets = [Self.packet(channel, command, length: payload.count, data: Array(payload.prefix(57)))]
    var offset = 57
    var sequence: UInt8 = 0
    while offset < payload.count {
      packets.append([UInt8](channel) + [sequence] + Array(payload[offset..<min(payload.count, offset + 59)]))
      offset += 59
      sequence += 1
    }
    for p in packets {
      let n = Self.write(fd, virtual: ref.isVirtual, p)
      guard n == (ref.isVirtual ? 64 : 65) else {
        throw n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? .noAnswer(operation: operation) : gone(operation)
      }
    }
  }

  /// Reads the answer to `command` on this channel until `end`: packets reassembled, other channels' reports and
  /// KEEPALIVE passed over (`touchCue` fires once on UP_NEEDED). While it waits, `cancel()` may send CANCEL.
  func receive(_ command: UInt8, operation: String, until end: UInt64, touchCue: (() -> Void)? = nil)
    throws(TokenError) -> [UInt8]
  {
    guard fd >= 0 else { throw .smartCard(.cardRemoved(reader: ref.path)) }
    let cid = channel.reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
    running.withLock { $0 = (fd, cid) }
    defer { running.withLock { $0 = (-1, 0) } }
    var message = FIDO2IO.Reassembly(channel: channel, command: command)
    var cue = touchCue
    var report = [UInt8](repeating: 0, count: 64)
    while true {
      let now = DispatchTime.now().uptimeNanoseconds
      let left = now >= end ? 0 : Int32(min(UInt64(Int32.max), (end - now + 999_999) / 1_000_000))
      switch FIDO2IO.waitReadable(fd, limitMs: left) {
      case .readable: break
      case .timedOut: throw .noAnswer(operation: operation)
      case .failed: throw gone(operation)
      }
      let n = Self.read(fd, virtual: ref.isVirtual, into: &report)
      if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { continue }
      guard n == 64 else { throw gone(operation) }
      guard Array(report[0..<4]) == channel else { continue }
      if report[4] == FIDO2IO.CTAPHID.keepalive {
        if report[7] == 2, let c = cue {  // UP_NEEDED
          cue = nil
          c()
        }
        continue
      }
      // CTAPHID_ERROR (e.g. ERR_CHANNEL_BUSY 0x06): a failed receive, as libfido2 reports it.
      if report[4] == FIDO2IO.CTAPHID.error { throw .fido2(FIDO_ERR_RX, operation: operation) }
      switch report.withUnsafeBufferPointer({ message.add($0) }) {
      case .more: continue
      case .done(let m): return m
      case .failed: throw .fido2(FIDO_ERR_RX, operation: operation)
      }
    }
  }

  /// An initialization packet: channel, command (bit 7 set), payload length, up to 57 bytes.
  static func packet(_ channel: [UInt8], _ command: UInt8, length: Int, data: [UInt8]) -> [UInt8] {
    var p = channel + [command, UInt8(length >> 8), UInt8(length & 0xFF)] + data
    p += [UInt8](repeating: 0, count: 64 - p.count)
    return p
  }

  /// One 64-byte report into `report` (64 bytes): a datagram from a virtual key's socket (not waiting), a read of a
  /// hidraw node; the byte count, or -1 with errno.
  static func read(_ fd: Int32, virtual: Bool, into report: inout [UInt8]) -> Int {
    var n: Int
    repeat {
      n = report.withUnsafeMutableBytes { raw in
        virtual ? recv(fd, raw.baseAddress!, 64, Int32(MSG_DONTWAIT)) : Glibc.read(fd, raw.baseAddress!, 64)
      }
    } while n < 0 && errno == EINTR
    return n
  }

  /// One 64-byte report: a datagram on a virtual key's socket, 65 bytes (report ID 0 first) on hidraw.
  static func write(_ fd: Int32, virtual: Bool, _ report: [UInt8]) -> Int {
    var r = report + [UInt8](repeating: 0, count: max(0, 64 - report.count))
    if !virtual { r.insert(0, at: 0) }
    var n: Int
    repeat {
      n = r.withUnsafeBytes { raw in
        virtual ? Glibc.send(fd, raw.baseAddress!, 64, Int32(MSG_NOSIGNAL)) : Glibc.write(fd, raw.baseAddress!, 65)
      }
    } while n < 0 && errno == EINTR
    return n
  }

  /// A send or receive that failed: the key went away (its socket hung up, its hidraw node is going), else the
  /// failed receive libfido2 would report.
  private func gone(_ operation: String) -> TokenError {
    let removed = ref.isVirtual || FIDO2Session.nodeGoes(ref.path)
    return removed ? .smartCard(.cardRemoved(reader: ref.path)) : .fido2(FIDO_ERR_RX, operation: operation)
  }
}
