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

/// What getInfo says (CTAP 2.1 §6.4), as far as TokenBridge uses it.
public struct FIDO2Info: Sendable, Equatable, Codable {
  public var versions: [String]
  public var extensions: [String]
  public var options: [String: Bool]
  public var pinProtocols: [Int]
  public var minPINLength: Int
  public var forcePINChange: Bool
  public var aaguid: String
  /// Built-in UV tries left (keys with `uv` only; read by discovery).
  public var uvRetries: Int?
  /// How many more discoverable credentials fit (getInfo 0x14, CTAP 2.1); nil when the key does not say.
  public var remainingDiscoverableCredentials: Int?
  /// Firmware version (getInfo 0x0E); nil when the key does not say.
  public var firmwareVersion: UInt64?
  /// Largest message the key takes (getInfo 0x05), bytes; nil when the key does not say.
  public var maxMsgSize: UInt64?

  public var pinIsSet: Bool { options["clientPin"] == true }
  public var supportsPIN: Bool { options["clientPin"] != nil }

  enum CodingKeys: String, CodingKey {
    case versions, extensions, options, pinProtocols, minPINLength, forcePINChange, aaguid, uvRetries
    case remainingDiscoverableCredentials, firmwareVersion, maxMsgSize
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

  static let initialized: Void = { fido_init(0) }()

  /// Loads libfido2 (at the first FIDO2 use, not at start-up); call before any libfido2 function.
  public static func loadLibrary() throws(TokenError) {
    do { try SystemLibrary.fido2.load() } catch { throw .libraryMissing(error) }
  }

  /// The virtual keys' sockets that exist: `virtualPaths`, else those named in `TOKENBRIDGE_VIRTUAL_FIDO` (socket
  /// paths separated by `:`).
  static func virtualSockets(_ virtualPaths: [String]?) -> [String] {
    (virtualPaths ?? namedVirtualKeys()).filter { access($0, F_OK) == 0 }
  }

  /// The socket paths in `TOKENBRIDGE_VIRTUAL_FIDO` (separated by `:`).
  static func namedVirtualKeys() -> [String] {
    (Environment.value("TOKENBRIDGE_VIRTUAL_FIDO") ?? "").utf8.split(separator: UInt8(ascii: ":")).map {
      String(decoding: $0, as: UTF8.self)
    }
  }

  /// Whether a key may be present: a virtual key's socket, or a hidraw node with the FIDO usage page. Without
  /// either, libfido2 would find nothing, so it is not loaded to look (a PIV-only command stays without it).
  public static func keysPossible(virtualPaths: [String]? = nil) -> Bool {
    keysPossible(virtualSockets: virtualSockets(virtualPaths))
  }

  static func keysPossible(virtualSockets: [String]) -> Bool {
    !virtualSockets.isEmpty || HIDReportDescriptor.anyFIDONode()
  }

  /// How many keys `list` may name, told without libfido2 (from sysfs and the virtual key list; may count one
  /// more, never fewer). Discovery's PC/SC side needs it while the FIDO2 side is still loading the library.
  public static func expectedKeys(virtualPaths: [String]? = nil) -> Int {
    virtualSockets(virtualPaths).count + HIDReportDescriptor.fidoNodeCount()
  }

  /// Keys present: libfido2's manifest (`fido_dev_info_manifest`: hidraw nodes with the FIDO usage page) plus the
  /// virtual keys named in `TOKENBRIDGE_VIRTUAL_FIDO`. None when no key is possible (`keysPossible`: libfido2 is
  /// then not loaded) or libfido2 cannot be loaded (`loadLibrary` says why).
  public static func list(virtualPaths: [String]? = nil) -> [FIDO2DeviceRef] {
    let virtual = virtualSockets(virtualPaths)
    guard keysPossible(virtualSockets: virtual), (try? loadLibrary()) != nil else { return [] }
    _ = initialized
    var out: [FIDO2DeviceRef] = []
    if !HIDReportDescriptor.anyFIDONode() {
      // No hidraw key: libfido2's manifest would walk udev for nothing.
    } else if let list = fido_dev_info_new(64) {
      var n = 0
      if fido_dev_info_manifest(list, 64, &n) == FIDO_OK {
        for i in 0..<n {
          guard let di = fido_dev_info_ptr(list, i), let p = fido_dev_info_path(di) else { continue }
          // libfido2 gives "" for a USB device without a product string.
          let product =
            fido_dev_info_product_string(di).map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 }
            ?? "FIDO2 key"
          out.append(FIDO2DeviceRef(path: String(cString: p), product: product, isVirtual: false))
        }
      }
      var l: OpaquePointer? = list
      fido_dev_info_free(&l, 64)
    }
    for p in virtual {
      out.append(FIDO2DeviceRef(path: p, product: "virtual FIDO2 key", isVirtual: true))
    }
    return out
  }

  /// The keys sysfs (hidraw nodes with the FIDO usage page on USB, as libfido2's manifest takes them) and the
  /// virtual key list name, found without libfido2: to say which keys cannot be used when it cannot be loaded.
  static func presentWithoutLibrary(virtualPaths: [String]?) -> [FIDO2DeviceRef] {
    HIDReportDescriptor.libfido2Nodes().map {
      FIDO2DeviceRef(path: "/dev/\($0.node)", product: $0.product ?? "FIDO2 key", isVirtual: false)
    } + virtualSockets(virtualPaths).map { FIDO2DeviceRef(path: $0, product: "virtual FIDO2 key", isVirtual: true) }
  }

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
    let start = DispatchTime.now().uptimeNanoseconds
    let rc = call()
    guard rc == FIDO_ERR_RX || rc == FIDO_ERR_TX || rc == FIDO_ERR_INTERNAL else { return rc }
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

  /// getInfo (`fido_dev_get_cbor_info`), read once per session; again after a call that changed what it says.
  public func info() throws(TokenError) -> FIDO2Info {
    if let knownInfo { return knownInfo }
    return try refreshInfo()
  }

  /// getInfo as far as the session has read it, without asking the key (nil: not read in this session).
  public var infoIfRead: FIDO2Info? { knownInfo }

  /// Forgets the getInfo answer: the key's state changed (PIN set or changed, reset, credentials stored).
  func infoChanged() { knownInfo = nil }

  /// What libfido2 learnt from the getInfo inside its open, without asking the key again: whether the key takes
  /// PIN tokens with permissions (`pinUvAuthToken`), has a PIN set, credential management, built-in UV.
  public var openedWith: (permissions: Bool, pinSet: Bool, credentialManagement: Bool, uv: Bool)? {
    guard let dev, fido_dev_is_fido2(dev) else { return nil }
    return (
      fido_dev_supports_permissions(dev), fido_dev_has_pin(dev), fido_dev_supports_credman(dev),
      fido_dev_has_uv(dev)
    )
  }

  /// Sends getInfo (`fido_dev_get_cbor_info`) and keeps the answer for `info()`.
  @discardableResult
  public func refreshInfo() throws(TokenError) -> FIDO2Info {
    guard let ci = fido_cbor_info_new() else { throw .fido2(FIDO_ERR_INTERNAL, operation: "getInfo") }
    defer {
      var c: OpaquePointer? = ci
      fido_cbor_info_free(&c)
    }
    trace?("fido2 > getInfo")
    let rc = try call("getInfo", deadlines.probeMs) { fido_dev_get_cbor_info($0, ci) }
    guard rc == FIDO_OK else { throw mapped(rc, "getInfo") }
    func strings(_ p: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, _ n: Int) -> [String] {
      guard let p else { return [] }
      return (0..<n).compactMap { p[$0].map { String(cString: $0) } }
    }
    let names = strings(fido_cbor_info_options_name_ptr(ci), fido_cbor_info_options_len(ci))
    let values = fido_cbor_info_options_value_ptr(ci)
    var options: [String: Bool] = [:]
    for (i, n) in names.enumerated() { options[n] = values?[i] ?? false }
    let protocols = (0..<fido_cbor_info_protocols_len(ci)).compactMap { fido_cbor_info_protocols_ptr(ci)?[$0] }
    let aaguid = (0..<fido_cbor_info_aaguid_len(ci)).compactMap { fido_cbor_info_aaguid_ptr(ci)?[$0] }
    let info = FIDO2Info(
      versions: strings(fido_cbor_info_versions_ptr(ci), fido_cbor_info_versions_len(ci)),
      extensions: strings(fido_cbor_info_extensions_ptr(ci), fido_cbor_info_extensions_len(ci)),
      options: options, pinProtocols: protocols.map(Int.init), minPINLength: max(4, Int(fido_cbor_info_minpinlen(ci))),
      forcePINChange: fido_cbor_info_new_pin_required(ci),
      aaguid: Hex.string(aaguid, uppercase: true, separator: nil),
      remainingDiscoverableCredentials: fido_cbor_info_rk_remaining(ci) >= 0
        ? Int(fido_cbor_info_rk_remaining(ci)) : nil,
      firmwareVersion: fido_cbor_info_fwversion(ci) > 0 ? fido_cbor_info_fwversion(ci) : nil,
      maxMsgSize: fido_cbor_info_maxmsgsiz(ci) > 0 ? fido_cbor_info_maxmsgsiz(ci) : nil)
    trace?("fido2 < getInfo: \(info.versions.joined(separator: ","))")
    knownInfo = info
    return info
  }

  /// PIN tries left (getPINRetries, `fido_dev_get_retry_count`; spends none). The reading also tells the
  /// cool-down memory what happened since the last one (`FIDO2CoolDown.observe`).
  public func pinRetries() throws(TokenError) -> Int {
    trace?("fido2 > clientPIN getPINRetries")
    var n: Int32 = 0
    let rc = try call("getPINRetries", deadlines.probeMs) { fido_dev_get_retry_count($0, &n) }
    guard rc == FIDO_OK else { throw mapped(rc, "getPINRetries") }
    trace?("fido2 < getPINRetries: \(n)")
    coolDown.observe(retries: Int(n), for: ref)
    return Int(n)
  }

  /// Built-in user verification tries left (getUVRetries), for keys with UV (fingerprint); nil otherwise.
  public func uvRetries(_ info: FIDO2Info) -> Int? {
    guard info.options["uv"] != nil else { return nil }
    var n: Int32 = 0
    guard let rc = try? call("getUVRetries", deadlines.probeMs, { fido_dev_get_uv_retry_count($0, &n) }),
      rc == FIDO_OK
    else { return nil }
    return Int(n)
  }

  /// The PIN status in the shape every token shares, with the cool-down as far as it is known
  /// (`powerCycleRequired`: false when nothing known says so).
  public func pinStatus() throws(TokenError) -> PINStatus {
    let left = try pinRetries()
    return PINStatus(kind: .pin, retriesLeft: left, maxRetries: 8, powerCycleRequired: powerCycleRequired)
  }

  /// setPIN (no PIN yet) or changePIN (`fido_dev_set_pin`). A wrong current PIN throws `.wrongPIN` with the tries
  /// read afterwards.
  public func setPIN(_ new: [UInt8], old: [UInt8]?) throws(TokenError) {
    let operation = old == nil ? "setPIN" : "changePIN"
    guard new.count <= 63 else { throw .pinFormat(.pin, .tooLong(maximum: 63)) }
    trace?("fido2 > clientPIN \(operation) <redacted>")
    let rc = try call(operation, deadlines.commandMs) { dev in
      Self.withCString(new) { n in Self.withCString(old) { o in fido_dev_set_pin(dev, n, o) } }
    }
    trace?("fido2 < \(rc == FIDO_OK ? "OK" : String(cString: fido_strerr(rc)))")
    guard rc == FIDO_OK else { throw pinAwareError(rc, operation) }
    if old != nil { coolDown.pinAccepted(for: ref) }
    infoChanged()  // clientPin is now true, forcePINChange false
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
