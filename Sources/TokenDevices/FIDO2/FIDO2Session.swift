import CFido2
import Dispatch
import FoundationEssentials
import Glibc
import Platform

/// A FIDO2 key as libfido2 sees it: a hidraw path, or a virtual key's socket.
public struct FIDO2DeviceRef: Sendable, Equatable {
  public var path: String
  public var product: String
  public var isVirtual: Bool

  public init(path: String, product: String, isVirtual: Bool) {
    self.path = path
    self.product = product
    self.isVirtual = isVirtual
  }
}

/// How long a FIDO2 key may take to answer, per kind of call (milliseconds; HardwareNotes.md, FIDO2 deadlines).
/// Each libfido2 call gets its deadline through `fido_dev_set_timeout` (hidraw and virtual keys alike; the
/// virtual transport also bounds each read and its connect). A call past its deadline throws `.noAnswer`.
public struct FIDO2Deadlines: Sendable, Equatable {
  /// Opening (CTAPHID_INIT, getInfo) and reads that spend nothing: getInfo, getPINRetries, getUVRetries.
  public var probeMs: Int32
  /// clientPIN set/change (key agreement and the PIN exchange: several round trips, no human).
  public var commandMs: Int32
  /// makeCredential / getAssertion: they wait for a human to touch the key. Keys end that wait themselves
  /// (CTAP2_ERR_USER_ACTION_TIMEOUT, typically after ~30 s), so this is only the bound for a key that stopped
  /// answering (it also no longer sends KEEPALIVE).
  public var userPresenceMs: Int32

  public init(probeMs: Int32, commandMs: Int32, userPresenceMs: Int32) {
    self.probeMs = probeMs
    self.commandMs = commandMs
    self.userPresenceMs = userPresenceMs
  }

  /// 3 s per probe, 10 s per PIN command, 90 s for a touch.
  public static let standard = FIDO2Deadlines(probeMs: 3_000, commandMs: 10_000, userPresenceMs: 90_000)
}

/// Speaks CTAP2 to one key through libfido2 (synchronous; one thread at a time). libfido2 builds and reads every
/// CTAPHID and CTAP2 message; the session gives it its transport (`fido_dev_set_io_functions`: `VirtualFIDOIO` or
/// `HidrawFIDOIO`, which bound every read and fire the touch cue) and a deadline per call (`fido_dev_set_timeout`).
/// The key is opened with the session (CTAPHID_INIT and getInfo, inside `fido_dev_open`) and stays open until
/// `close()`.
public final class FIDO2Session {
  public private(set) var ref: FIDO2DeviceRef
  /// Cancels an operation of this session that waits for a touch (from a Ctrl-C handler).
  public let canceller = FIDO2Canceller()
  /// libfido2's device; nil once the session was closed (until `reopen`): the key is then taken as gone.
  var dev: OpaquePointer?
  public var trace: TraceSink?
  /// Told when the key waits for a touch ("Touch your key").
  public var touchCue: (() -> Void)?
  /// The deadlines of this session's calls.
  public var deadlines: FIDO2Deadlines
  /// The custom I/O's per-session state (virtual and hidraw keys alike: libfido2's own I/O is not used).
  let io: FIDO2IO.Context
  /// getInfo as `info()` read it in this session; nil after a call that changes what getInfo says (setPIN, reset,
  /// a credential stored or deleted): `info()` then asks the key again.
  var knownInfo: FIDO2Info?
  /// What this user's own PIN attempts learnt about the key's cool-down since it was plugged in (`FIDO2CoolDown`):
  /// libfido2 1.12 does not pass getPINRetries' powerCycleState on, and many keys leave it out.
  let coolDown: FIDO2CoolDown

  /// Known to take no PIN until it is re-inserted: three wrong PINs in a row since it was plugged in, as this
  /// user's own attempts and tries readings show (`FIDO2CoolDown`), or the key refused a PIN with PIN_AUTH_BLOCKED.
  /// False when nothing known says so: a cool-down that another user's program began unseen cannot be known.
  public var powerCycleRequired: Bool { coolDown.required(for: ref) }

  /// Opens the key through libfido2 (CTAPHID_INIT and getInfo inside `fido_dev_open`), bounded by the probe
  /// deadline.
  public init(
    _ ref: FIDO2DeviceRef, deadlines: FIDO2Deadlines = .standard, trace: TraceSink? = nil,
    coolDown: FIDO2CoolDown = .forThisUser
  ) throws(TokenError) {
    self.ref = ref
    self.deadlines = deadlines
    self.trace = trace
    self.coolDown = coolDown
    io = FIDO2IO.Context(readDeadlineMs: deadlines.probeMs)
    try Self.loadLibrary()
    _ = Self.initialized
    try open()
  }

  /// libfido2's device for this key; a closed session (`close()`, until `reopen`) has none: the key is taken as
  /// gone.
  func device() throws(TokenError) -> OpaquePointer {
    guard let dev else { throw .smartCard(.cardRemoved(reader: ref.path)) }
    return dev
  }

  /// Runs one libfido2 call on `d` with a deadline of `ms`. Returns libfido2's status; a transport failure
  /// (FIDO_ERR_RX/TX, or a failed open) that came from the deadline rather than from the key going away is
  /// reported as `nil` (no answer).
  func bounded(_ d: OpaquePointer?, _ ms: Int32, _ call: () -> Int32) -> Int32? {
    if let d { _ = fido_dev_set_timeout(d, Int32(ms)) }
    io.readDeadlineMs = ms
    io.timedOut = false
    io.peerGone = false
    io.abandoned = false
    let start = DispatchTime.now().uptimeNanoseconds
    let rc = call()
    guard rc == FIDO_ERR_RX || rc == FIDO_ERR_TX || rc == FIDO_ERR_INTERNAL else { return rc }
    // Cancelled, and the key did not answer the cancel: ended as the cancel would have ended it.
    if io.abandoned { return FIDO_ERR_KEEPALIVE_CANCEL }
    if io.timedOut { return nil }
    if ref.isVirtual { return rc }
    // hidraw: libfido2 also ends a call whose deadline it finds spent before it reads (the time is the tell).
    let elapsedMs = (DispatchTime.now().uptimeNanoseconds - start) / 1_000_000
    return elapsedMs * 10 >= UInt64(ms) * 9 ? nil : rc
  }

  /// `bounded` on this session's device, throwing `.noAnswer(operation:)` for a call that ran out of time.
  func call(_ operation: String, _ ms: Int32, _ body: (OpaquePointer) -> Int32) throws(TokenError) -> Int32 {
    let dev = try device()
    guard let rc = bounded(dev, ms, { body(dev) }) else { throw .noAnswer(operation: operation) }
    return rc
  }

  deinit { closeDevice() }

  /// Opens the device (CTAPHID_INIT, then getInfo inside libfido2), bounded by the probe deadline, through our
  /// own I/O (`VirtualFIDOIO` or `HidrawFIDOIO`).
  func open() throws(TokenError) {
    if !ref.isVirtual, let refusal = Self.reportLengthRefusal(ref.path) { throw refusal }
    guard let d = fido_dev_new() else { throw .fido2(FIDO_ERR_INTERNAL, operation: "open") }
    var functions = ref.isVirtual ? VirtualFIDOIO.functions : HidrawFIDOIO.functions
    guard fido_dev_set_io_functions(d, &functions) == FIDO_OK else {
      var dd: OpaquePointer? = d
      fido_dev_free(&dd)
      throw .fido2(FIDO_ERR_INTERNAL, operation: "open")
    }
    let path = ref.path
    io.initCapabilities = nil
    trace?("fido2 > open (CTAPHID_INIT, getInfo)")
    let rc = bounded(d, deadlines.probeMs) { FIDO2IO.opening(with: io) { fido_dev_open(d, path) } }
    guard rc == FIDO_OK else {
      var dd: OpaquePointer? = d
      fido_dev_free(&dd)
      guard let rc else { throw .noAnswer(operation: "open") }
      throw [FIDO_ERR_RX, FIDO_ERR_TX, FIDO_ERR_INTERNAL].contains(rc) ? mapped(rc, "open") : Self.error(rc, "open")
    }
    dev = d
    guard !fido_dev_is_fido2(d) else { return }
    // libfido2 takes a key for U2F-only when CTAPHID_INIT says it has no CBOR (FIDO_CAP_CBOR, CTAP 2.1 §11.2.9.1.3),
    // and also when the getInfo inside its open failed (dev.c `fido_dev_open_rx`): then our own getInfo says why.
    guard (io.initCapabilities ?? 0) & UInt8(FIDO_CAP_CBOR) != 0 else {
      closeDevice()
      throw .unsupported("FIDO2 (CTAP2): it answered CTAPHID_INIT as a U2F-only key")
    }
    fido_dev_force_fido2(d)
    do { try refreshInfo() } catch {
      closeDevice()
      throw error
    }
  }

  /// libfido2 with custom I/O frames 64-byte reports (dev.c `fido_dev_open_tx`); a hidraw node whose report
  /// descriptor declares other lengths would be misframed, so it is refused. A node sysfs does not describe is
  /// taken as 64 bytes, as libfido2 does when it cannot read a descriptor.
  static func reportLengthRefusal(_ path: String, sys: String = "/sys") -> TokenError? {
    guard let lengths = HIDReportDescriptor.reportLengths(ofNode: path, sys: sys),
      lengths.input.map({ $0 != 64 }) ?? false || lengths.output.map({ $0 != 64 }) ?? false
    else { return nil }
    return .unsupported(
      "64-byte FIDO HID reports (its HID descriptor declares \(lengths.input ?? 0)-byte input and "
        + "\(lengths.output ?? 0)-byte output reports)")
  }

  func closeDevice() {
    guard dev != nil else { return }
    fido_dev_close(dev)
    fido_dev_free(&dev)
    dev = nil
  }

  /// Closes and opens again (after a replug).
  public func reopen() throws(TokenError) {
    closeDevice()
    infoChanged()  // a replugged key may have been reset meanwhile
    try open()
  }

  /// Opens the key again at `path` (a replugged hidraw key may come back under another number).
  public func reopen(at path: String) throws(TokenError) {
    closeDevice()
    infoChanged()
    ref.path = path
    try open()
  }

  /// `Self.error`, except that a transport failure (FIDO_ERR_RX/TX) means removal only when the key is gone: the
  /// virtual key's socket hung up, or the hidraw node disappeared. A key that is there but sent something
  /// libfido2 could not take (a wrong command byte, bad framing) is `.fido2(FIDO_ERR_RX, operation:)`.
  func mapped(_ rc: Int32, _ operation: String) -> TokenError {
    guard [FIDO_ERR_RX, FIDO_ERR_TX, FIDO_ERR_INTERNAL].contains(rc) else { return Self.error(rc, operation) }
    if rc == FIDO_ERR_INTERNAL, !io.peerGone { return Self.error(rc, operation) }
    let gone = ref.isVirtual ? io.peerGone : Self.nodeGoes(ref.path)
    return gone ? .smartCard(.cardRemoved(reader: ref.path)) : .fido2(rc, operation: operation)
  }

  /// Whether the hidraw node goes away within `ms`: a read can fail (EIO) while the kernel is still tearing the
  /// unplugged interface down, before the node is removed (seen in the token lab on a USB/IP detach).
  static func nodeGoes(_ path: String, ms: Int = 1000) -> Bool {
    for _ in 0..<(ms / 50) {
      if !FileManager.default.fileExists(atPath: path) { return true }
      usleep(50_000)
    }
    return !FileManager.default.fileExists(atPath: path)
  }

  /// libfido2 status → the device layer's error shape.
  static func error(_ rc: Int32, _ operation: String) -> TokenError {
    switch rc {
    case FIDO_ERR_PIN_BLOCKED: .pinBlocked(.pin)
    case FIDO_ERR_PIN_AUTH_BLOCKED: .needsReinsertion
    case FIDO_ERR_PIN_POLICY_VIOLATION: .pinFormat(.pin, .refusedByToken(nil))
    case FIDO_ERR_PIN_NOT_SET: .pinNotSet
    case FIDO_ERR_TX, FIDO_ERR_RX: .smartCard(.cardRemoved(reader: ""))
    case FIDO_ERR_NO_CREDENTIALS: .noCredential(operation: operation)
    case FIDO_ERR_USER_ACTION_TIMEOUT, FIDO_ERR_ACTION_TIMEOUT: .touchTimeout
    case FIDO_ERR_OPERATION_DENIED: .touchDenied
    case FIDO_ERR_KEEPALIVE_CANCEL: .cancelled
    // An answer libfido2 could not read as CBOR, or CBOR it could not take (CTAP 2.1 §8).
    case FIDO_ERR_RX_NOT_CBOR, FIDO_ERR_RX_INVALID_CBOR: .malformedResponse(operation: operation)
    default: .fido2(rc, operation: operation)
    }
  }
}

extension TokenError {
  /// A libfido2 status in words.
  /// Without libfido2 (a listing reads keys without it, and it may be missing) the code is given as a number:
  /// calling into a library that cannot be loaded would end the process.
  public static func fido2Message(_ code: Int32) -> String {
    guard (try? FIDO2Session.loadLibrary()) != nil else {
      return code > 0 ? "CTAP2 status 0x" + String(code, radix: 16, uppercase: true) : "libfido2 error \(code)"
    }
    return String(cString: fido_strerr(code))
  }
}
