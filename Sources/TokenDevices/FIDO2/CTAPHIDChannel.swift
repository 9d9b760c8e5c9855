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
/// One channel per key, all of them driven by one thread (`read(_:deadlines:tracing:details:)`): each key's exchange
/// is a small state machine that goes on when its descriptor is readable (one poll over all of them), and each
/// request has a deadline of its own, so a silent key delays no other. A thread per key cost more than the keys'
/// own exchanges (thread creation was a tenth of a four-key listing's CPU, perf).
///
/// The transports are those of the custom I/O: a virtual key's SOCK_SEQPACKET socket (one datagram = one 64-byte
/// report), or a hidraw node opened and locked as libfido2 opens it (65-byte writes, report ID 0 first; 64-byte
/// reads). HardwareNotes.md, "Listing without libfido2".
final class CTAPHIDChannel {
  /// Where the exchange is: waiting for the answer to this request (or, `opening`, for a hidraw node's lock).
  enum Step {
    case opening, initialize, getInfo, uvRetries, pinRetries
    var operation: String {
      switch self {
      case .opening, .initialize: "open"
      case .getInfo: "getInfo"
      case .uvRetries: "getUVRetries"
      case .pinRetries: "getPINRetries"
      }
    }
  }

  let ref: FIDO2DeviceRef
  private let ms: Int32
  private let details: Bool
  private let sys: String
  private(set) var fd: Int32 = -1
  private var channel = FIDO2IO.CTAPHID.broadcast
  private var nonce: [UInt8] = []
  /// What CTAPHID_INIT said the key can do; CAPFLAG_CBOR (0x04): it speaks CTAP2.
  private(set) var capabilities: UInt8 = 0
  private(set) var step = Step.opening
  private var message: FIDO2IO.Reassembly
  /// When the current step runs out (uptime nanoseconds); while `opening`, when waiting for the lock ends.
  private var deadline: UInt64 = 0
  /// While `opening`: the next try at a hidraw node another process keeps locked.
  private var retryAt: UInt64?
  private var pauseMs: UInt64 = 10
  private var info: FIDO2Info?
  /// Trace lines, when tracing.
  private(set) var lines: [String]?
  /// Set once the exchange ended: what the key said (getInfo, the PIN tries when a PIN is set), or why not.
  private(set) var result: Result<(FIDO2Info, PINStatus?), TokenError>?

  /// Nothing is opened yet (`start`). With `details`, a key with built-in UV is also asked its UV tries. `sys`: the
  /// sysfs root, for tests.
  init(_ ref: FIDO2DeviceRef, ms: Int32, details: Bool = true, tracing: Bool = false, sys: String = "/sys") {
    self.ref = ref
    self.ms = ms
    self.details = details
    self.sys = sys
    lines = tracing ? [] : nil
    message = FIDO2IO.Reassembly(channel: FIDO2IO.CTAPHID.broadcast, command: FIDO2IO.CTAPHID.initialize)
  }

  deinit { if fd >= 0 { close(fd) } }  // releases a hidraw node's lock

  var speaksCTAP2: Bool { capabilities & 0x04 != 0 }

  static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

  /// Reads every key in `refs` on this thread, each bounded by `deadlines.probeMs` per request; in `refs` order.
  static func read(_ refs: [FIDO2DeviceRef], deadlines: FIDO2Deadlines, tracing: Bool, details: Bool)
    -> [CTAPHIDChannel]
  {
    let keys = refs.map { CTAPHIDChannel($0, ms: deadlines.probeMs, details: details, tracing: tracing) }
    for key in keys { key.start() }
    while true {
      let open = keys.filter { $0.result == nil }
      guard let wake = open.map(\.wakeAt).min() else { return keys }
      // A key waiting for its lock has no descriptor yet: poll skips a negative one.
      var fds = open.map { pollfd(fd: $0.fd, events: Int16(POLLIN), revents: 0) }
      let now = now()
      let timeout = wake <= now ? 0 : Int32(min(UInt64(Int32.max), (wake - now + 999_999) / 1_000_000))
      if poll(&fds, nfds_t(fds.count), timeout) < 0 && errno != EINTR {
        for key in open { key.fail(.fido2(FIDO_ERR_RX, operation: key.step.operation)) }
        return keys
      }
      for (key, p) in zip(open, fds) {
        if p.fd >= 0, p.revents != 0 { key.readable() } else { key.timePassed() }
      }
    }
  }

  /// When the loop must look at this key even if nothing arrives: its deadline, or its next try at a lock.
  var wakeAt: UInt64 { retryAt.map { min($0, deadline) } ?? deadline }

  private func trace(_ line: @autoclosure () -> String) { lines?.append(line()) }

  private func fail(_ error: TokenError) {
    if fd >= 0 {
      close(fd)
      fd = -1
    }
    result = .failure(error)
  }

  /// Opens the transport and sends CTAPHID_INIT; a hidraw node another process keeps locked is tried again later
  /// (`timePassed`), until the deadline.
  func start() {
    let now = Self.now()
    if retryAt == nil { deadline = now + UInt64(max(1, ms)) * 1_000_000 }  // the first try: the lock's deadline
    retryAt = nil
    if ref.isVirtual {
      guard let s = VirtualFIDOIO.connectSocket(ref.path, deadlineMs: ms) else {
        return fail(Self.openError(errno, ref))
      }
      fd = s
    } else {
      if let refusal = FIDO2Session.reportLengthRefusal(ref.path, sys: sys) { return fail(refusal) }
      switch HidrawFIDOIO.tryOpenLocked(ref.path) {
      case .opened(let d): fd = d
      case .busy:
        guard now < deadline else { return fail(.noAnswer(operation: "open")) }  // another process keeps the key
        retryAt = now + pauseMs * 1_000_000
        pauseMs = min(pauseMs * 2, 100)
        return
      case .notOpened(let why), .failed(let why): return fail(Self.openError(why, ref))
      }
    }
    var random = SystemRandomNumberGenerator()  // one getrandom for the 8 bytes, not one per byte
    nonce = withUnsafeBytes(of: random.next() as UInt64) { Array($0) }
    trace("fido2 > CTAPHID_INIT")
    send(.initialize, FIDO2IO.CTAPHID.initialize, nonce)
  }

  /// A key gone (no socket, no node) is removed; any other failed open is what libfido2's open says of it.
  static func openError(_ why: Int32, _ ref: FIDO2DeviceRef) -> TokenError {
    [ENOENT, ECONNREFUSED, ENODEV, ENXIO].contains(why)
      ? .smartCard(.cardRemoved(reader: ref.path)) : .fido2(FIDO_ERR_INTERNAL, operation: "open")
  }

  /// Nothing arrived: a lock to try again, or a deadline passed. The UV tries are only a detail: without them the
  /// key is still listed (as `FIDO2Session.uvRetries` gives nil).
  func timePassed() {
    let now = Self.now()
    if let retryAt, retryAt <= now { return start() }
    guard now >= deadline else { return }
    if step == .uvRetries { return askPINRetriesOrFinish() }
    fail(.noAnswer(operation: step.operation))
  }

  /// One request in one initialization packet (every request here is at most 57 bytes), with a new deadline.
  private func send(_ next: Step, _ command: UInt8, _ payload: [UInt8]) {
    precondition(payload.count <= 57, "a CTAPHID request of one packet")
    step = next
    message = FIDO2IO.Reassembly(channel: channel, command: command)
    deadline = Self.now() + UInt64(max(0, ms)) * 1_000_000
    let virtual = ref.isVirtual
    let n = CTAP2Link.write(
      fd, virtual: virtual, CTAP2Link.packet(channel, command, length: payload.count, data: payload))
    if n == (virtual ? 64 : 65) { return }
    // SO_SNDTIMEO (a peer that stopped reading) or the key gone.
    fail(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? .noAnswer(operation: next.operation) : transportFailed())
  }

  /// One report: KEEPALIVE and other channels' reports are passed over; a complete message goes on with the
  /// exchange. CTAPHID_ERROR (e.g. ERR_CHANNEL_BUSY) is reported as libfido2 reports it, a failed receive.
  func readable() {
    var report = [UInt8](repeating: 0, count: 64)
    let n = CTAP2Link.read(fd, virtual: ref.isVirtual, into: &report)
    if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return timePassed() }
    guard n == 64 else { return fail(transportFailed()) }
    guard Array(report[0..<4]) == channel, report[4] != FIDO2IO.CTAPHID.keepalive else { return timePassed() }
    if report[4] == FIDO2IO.CTAPHID.error { return fail(.fido2(FIDO_ERR_RX, operation: step.operation)) }
    switch report.withUnsafeBufferPointer({ message.add($0) }) {
    case .more: timePassed()
    case .done(let m): answered(m)
    case .failed: fail(.fido2(FIDO_ERR_RX, operation: step.operation))
    }
  }

  /// A complete answer to the current step's request.
  private func answered(_ m: [UInt8]) {
    switch step {
    case .opening: break
    case .initialize:
      // nonce (8), channel (4), CTAPHID protocol version, major, minor, build, capabilities (CTAP 2.1 §11.2.9.1.3)
      guard m.count >= 17 else { return fail(.malformedResponse(operation: "open")) }
      guard Array(m[0..<8]) == nonce else {  // an answer to another INIT on the broadcast channel
        message = FIDO2IO.Reassembly(channel: channel, command: FIDO2IO.CTAPHID.initialize)
        return
      }
      channel = Array(m[8..<12])
      capabilities = m[16]
      trace("fido2 < CTAPHID_INIT: channel \(channel.hexString), capabilities \([capabilities].hexString)")
      // libfido2 would open a key without CTAP2 as a U2F key, whose getInfo then fails: not one to list as usable.
      guard speaksCTAP2 else {
        return fail(.unsupported("FIDO2 (CTAP2): it answered CTAPHID_INIT as a U2F-only key"))
      }
      trace("fido2 > getInfo")
      send(.getInfo, FIDO2IO.CTAPHID.cbor, [0x04])
    case .getInfo:
      guard let body = body(m, "getInfo") else { return }
      guard let parsed = FIDO2GetInfo.parse(body) else { return fail(.malformedResponse(operation: "getInfo")) }
      trace("fido2 < getInfo: \(body.count) bytes")
      info = parsed
      if details, parsed.options["uv"] != nil { return askRetries(uv: true) }
      askPINRetriesOrFinish()
    case .uvRetries:
      if case .success(let body) = Self.status(m, "getUVRetries"), let n = FIDO2GetInfo.unsigned(0x05, inMap: body),
        n <= 255
      {
        trace("fido2 < getUVRetries: \(n)")
        info?.uvRetries = Int(n)
      }
      askPINRetriesOrFinish()
    case .pinRetries:
      guard let body = body(m, "getPINRetries") else { return }
      // pinRetries (0x03) and the power-cycle state, from one parse of the map.
      guard let map = CTAP2CBOR.map(Array(body)), case .unsigned(let n)? = CTAP2CBOR.field(map, 3), n <= 255, let info
      else { return fail(.malformedResponse(operation: "getPINRetries")) }
      let coolingDown = CTAP2CBOR.powerCycleState(map)
      trace("fido2 < getPINRetries: \(n)\(coolingDown == true ? ", power cycle required" : "")")
      finish(info, PINStatus(kind: .pin, retriesLeft: Int(n), maxRetries: 8, powerCycleRequired: coolingDown))
    }
  }

  /// Tries left, none spent: getPINRetries (clientPIN subCommand 0x01, pinRetries 0x03) or getUVRetries (0x07,
  /// uvRetries 0x05). The request is libfido2's (pin.c): {pinUvAuthProtocol: 1, subCommand}.
  private func askRetries(uv: Bool) {
    let next = uv ? Step.uvRetries : .pinRetries
    trace("fido2 > clientPIN \(next.operation)")
    send(next, FIDO2IO.CTAPHID.cbor, [0x06, 0xA2, 0x01, 0x01, 0x02, uv ? 0x07 : 0x01])
  }

  private func askPINRetriesOrFinish() {
    guard let info else { return fail(.malformedResponse(operation: "getInfo")) }
    if info.pinIsSet { return askRetries(uv: false) }
    finish(info, nil)
  }

  private func finish(_ info: FIDO2Info, _ pin: PINStatus?) {
    close(fd)
    fd = -1
    result = .success((info, pin))
  }

  /// The CBOR after a status of 0 (success); a message without one is malformed, another status is the key's error.
  static func status(_ m: [UInt8], _ operation: String) -> Result<[UInt8], TokenError> {
    guard let status = m.first else { return .failure(.malformedResponse(operation: operation)) }
    guard status == 0 else { return .failure(FIDO2Session.error(Int32(status), operation)) }
    return .success(Array(m.dropFirst()))
  }

  /// `status`, ending the exchange with its error (nil) when the key did not answer success.
  private func body(_ m: [UInt8], _ operation: String) -> [UInt8]? {
    switch Self.status(m, operation) {
    case .success(let body): return body
    case .failure(let error):
      fail(error)
      return nil
    }
  }

  /// A send or receive that failed: the key went away (its socket hung up, its hidraw node is going), else the
  /// failed receive libfido2 would report.
  private func transportFailed() -> TokenError {
    let gone = ref.isVirtual || FIDO2Session.nodeGoes(ref.path)
    return gone ? .smartCard(.cardRemoved(reader: ref.path)) : .fido2(FIDO_ERR_RX, operation: step.operation)
  }
}
