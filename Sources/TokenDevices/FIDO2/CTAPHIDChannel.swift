import CFido2
import Dispatch
import FoundationEssentials

#if canImport(Glibc)
  import Glibc
#endif

/// CTAPHID spoken by TokenBridge itself, for what a token listing reads of a FIDO2 key: CTAPHID_INIT, getInfo and
/// the PIN tries (and a built-in UV's tries). These requests change nothing and need no PIN protocol; everything
/// else goes through libfido2 (`FIDO2Session`).
///
/// Why: loading libfido2 loads libcrypto with it, and binding the two was half of what `tokens --json` cost with
/// four keys (4.07M of 8.03M instructions, callgrind), which kept the 8 cards + 4 keys listing over its goal
/// (issue 12). ykman and python-fido2 list keys with CTAPHID of their own too.
///
/// The transports are those of the custom I/O: a virtual key's SOCK_SEQPACKET socket (one datagram = one 64-byte
/// report), or a hidraw node opened and locked as libfido2 opens it (65-byte writes, report ID 0 first; 64-byte
/// reads). Every read is bounded by the deadline of its request. HardwareNotes.md, "FIDO2 listing".
final class CTAPHIDChannel {
  let ref: FIDO2DeviceRef
  private let handle: FIDO2IO.Handle
  /// The channel CTAPHID_INIT allocated.
  private(set) var channel = FIDO2IO.CTAPHID.broadcast
  /// What CTAPHID_INIT said the key can do; CAPFLAG_CBOR (0x04): it speaks CTAP2.
  private(set) var capabilities: UInt8 = 0
  private let trace: TraceSink?

  var speaksCTAP2: Bool { capabilities & 0x04 != 0 }

  /// Opens the transport (waiting for a hidraw node's lock within `ms`) and allocates a channel (CTAPHID_INIT). A
  /// hidraw node whose descriptor declares reports of another length than 64 bytes is refused first, as
  /// `FIDO2Session.open` refuses it (`sys`: the sysfs root, for tests).
  init(_ ref: FIDO2DeviceRef, ms: Int32, trace: TraceSink?, sys: String = "/sys") throws(TokenError) {
    if !ref.isVirtual, let refusal = FIDO2Session.reportLengthRefusal(ref.path, sys: sys) { throw refusal }
    self.ref = ref
    self.trace = trace
    let context = FIDO2IO.Context(readDeadlineMs: ms)
    let fd =
      ref.isVirtual
      ? VirtualFIDOIO.connectSocket(ref.path, deadlineMs: ms) : HidrawFIDOIO.openLocked(ref.path, context: context)
    guard let fd else {
      let why = errno
      if context.timedOut { throw .noAnswer(operation: "open") }  // another process keeps the key
      if [ENOENT, ECONNREFUSED, ENODEV, ENXIO].contains(why) { throw .smartCard(.cardRemoved(reader: ref.path)) }
      throw .fido2(FIDO_ERR_INTERNAL, operation: "open")  // what libfido2's open says of a failed open
    }
    handle = FIDO2IO.Handle(fd: fd, context: context)
    try initialize(ms: ms)
  }

  deinit { close(handle.fd) }  // releases a hidraw node's lock

  /// CTAPHID_INIT on the broadcast channel with a random nonce; the answer carrying that nonce gives the channel
  /// (answers to other nonces are passed over).
  private func initialize(ms: Int32) throws(TokenError) {
    var random = SystemRandomNumberGenerator()  // one getrandom for the 8 bytes, not one per byte
    let nonce = withUnsafeBytes(of: random.next() as UInt64) { Array($0) }
    trace?("fido2 > CTAPHID_INIT")
    try send(FIDO2IO.CTAPHID.initialize, nonce, operation: "open")
    let end = Self.deadline(ms)
    while true {
      // nonce (8), channel (4), CTAPHID protocol version, major, minor, build, capabilities (CTAP 2.1 §11.2.9.1.3)
      let answer = try receive(FIDO2IO.CTAPHID.initialize, operation: "open", until: end)
      guard answer.count >= 17 else { throw .malformedResponse(operation: "open") }
      guard Array(answer[0..<8]) == nonce else { continue }
      channel = Array(answer[8..<12])
      capabilities = answer[16]
      trace?("fido2 < CTAPHID_INIT: channel \(channel.hexString), capabilities \([capabilities].hexString)")
      return
    }
  }

  /// getInfo (CTAP 2.1 §6.4).
  func info(ms: Int32) throws(TokenError) -> FIDO2Info {
    trace?("fido2 > getInfo")
    let body = try cbor([0x04], operation: "getInfo", ms: ms)
    guard let info = FIDO2GetInfo.parse(body) else { throw .malformedResponse(operation: "getInfo") }
    trace?("fido2 < getInfo: \(body.count) bytes")
    return info
  }

  /// Tries left, none spent: getPINRetries (clientPIN subCommand 0x01, pinRetries 0x03) or getUVRetries (0x07,
  /// uvRetries 0x05). The request is libfido2's (pin.c): {pinUvAuthProtocol: 1, subCommand}.
  func retries(uv: Bool, ms: Int32) throws(TokenError) -> Int {
    let operation = uv ? "getUVRetries" : "getPINRetries"
    trace?("fido2 > clientPIN \(operation)")
    let body = try cbor([0x06, 0xA2, 0x01, 0x01, 0x02, uv ? 0x07 : 0x01], operation: operation, ms: ms)
    guard let n = FIDO2GetInfo.unsigned(uv ? 0x05 : 0x03, inMap: body), n <= 255 else {
      throw .malformedResponse(operation: operation)
    }
    trace?("fido2 < \(operation): \(n)")
    return Int(n)
  }

  /// One CTAPHID_CBOR exchange: the CBOR after a status of 0 (success); another status is the key's error.
  private func cbor(_ request: [UInt8], operation: String, ms: Int32) throws(TokenError) -> [UInt8] {
    try send(FIDO2IO.CTAPHID.cbor, request, operation: operation)
    let message = try receive(FIDO2IO.CTAPHID.cbor, operation: operation, until: Self.deadline(ms))
    guard let status = message.first else { throw .malformedResponse(operation: operation) }
    guard status == 0 else { throw FIDO2Session.error(Int32(status), operation) }
    return Array(message.dropFirst())
  }

  static func deadline(_ ms: Int32) -> UInt64 {
    DispatchTime.now().uptimeNanoseconds + UInt64(max(0, ms)) * 1_000_000
  }

  /// One request in one initialization packet (every request here is at most 57 bytes).
  private func send(_ command: UInt8, _ payload: [UInt8], operation: String) throws(TokenError) {
    precondition(payload.count <= 57, "a CTAPHID request of one packet")
    var report = [UInt8](repeating: 0, count: 65)  // report ID 0, then the 64-byte report
    report.replaceSubrange(1..<5, with: channel)
    report[5] = command
    report[6] = 0
    report[7] = UInt8(payload.count)
    report.replaceSubrange(8..<8 + payload.count, with: payload)
    let (fd, virtual) = (handle.fd, ref.isVirtual)
    var n: Int
    repeat {
      n = report.withUnsafeBytes { raw in
        virtual ? Glibc.send(fd, raw.baseAddress! + 1, 64, Int32(MSG_NOSIGNAL)) : write(fd, raw.baseAddress!, 65)
      }
    } while n < 0 && errno == EINTR
    if n == (virtual ? 64 : 65) { return }
    if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { throw .noAnswer(operation: operation) }  // SO_SNDTIMEO
    throw transportFailed(operation)
  }

  /// The message of `command` on this channel, from its reports; KEEPALIVE and other channels' reports are passed
  /// over. Nothing by `end` (uptime nanoseconds) is `.noAnswer`.
  private func receive(_ command: UInt8, operation: String, until end: UInt64) throws(TokenError) -> [UInt8] {
    var message = FIDO2IO.Reassembly(channel: channel, command: command)
    var report = [UInt8](repeating: 0, count: 64)
    let (fd, virtual) = (handle.fd, ref.isVirtual)
    while true {
      let now = DispatchTime.now().uptimeNanoseconds
      let left = now >= end ? 0 : Int32(min(UInt64(Int32.max), (end - now + 999_999) / 1_000_000))
      switch FIDO2IO.waitReadable(fd, limitMs: left) {
      case .readable: break
      case .timedOut: throw .noAnswer(operation: operation)
      case .failed: throw transportFailed(operation)
      }
      var n: Int
      repeat {
        n = report.withUnsafeMutableBytes { raw in
          virtual ? recv(fd, raw.baseAddress!, 64, Int32(MSG_DONTWAIT)) : read(fd, raw.baseAddress!, 64)
        }
      } while n < 0 && errno == EINTR
      guard n == 64 else { throw transportFailed(operation) }
      guard Array(report[0..<4]) == channel, report[4] != FIDO2IO.CTAPHID.keepalive else { continue }
      // CTAPHID_ERROR (e.g. ERR_CHANNEL_BUSY): libfido2 reports it as a failed receive.
      if report[4] == FIDO2IO.CTAPHID.error { throw .fido2(FIDO_ERR_RX, operation: operation) }
      switch report.withUnsafeBufferPointer({ message.add($0) }) {
      case .more: continue
      case .done(let m): return m
      case .failed: throw .fido2(FIDO_ERR_RX, operation: operation)
      }
    }
  }

  /// A send or receive that failed: the key went away (its socket hung up, its hidraw node is going), else the
  /// failed receive libfido2 would report.
  private func transportFailed(_ operation: String) -> TokenError {
    let gone = ref.isVirtual || FIDO2Session.nodeGoes(ref.path)
    return gone ? .smartCard(.cardRemoved(reader: ref.path)) : .fido2(FIDO_ERR_RX, operation: operation)
  }
}
