import CFido2
import Dispatch
import FoundationEssentials
import Glibc

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

/// Speaks CTAP2 to one key (synchronous; one thread at a time): over a channel of its own (`CTAP2Link`) for getInfo,
/// the tries, the PIN protocol and the hmac-secret assertion, through libfido2 for everything else. The channel is
/// opened with the session; libfido2 is loaded and opens the key only when a call needs it (`device()`), and from
/// then on carries every call of the session (the two cannot both hold a hidraw node's lock).
public final class FIDO2Session {
  public private(set) var ref: FIDO2DeviceRef
  /// Cancels an operation of this session that waits for a touch (from a Ctrl-C handler).
  public let canceller = FIDO2Canceller()
  /// libfido2's device, once a call needed it (`device()`); nil while the session speaks over `link`.
  var dev: OpaquePointer?
  /// The session's own channel, until libfido2 opens the key.
  var link: CTAP2Link?
  public var trace: TraceSink?
  /// Told when the key waits for a touch ("Touch your key").
  public var touchCue: (() -> Void)?
  /// The deadlines of this session's calls.
  public var deadlines: FIDO2Deadlines
  /// The custom I/O's per-session state (virtual and hidraw keys alike: libfido2's own I/O is not used).
  let io: FIDO2IO.Context
  /// getInfo as the key answered it: captured from the request libfido2 sends while opening (`FIDO2IO`), or
  /// read by `refreshInfo()`. Nil after a call that changes what getInfo says (setPIN, reset, a credential
  /// stored or deleted): `info()` then asks the key again.
  var knownInfo: FIDO2Info?
  /// The key said, with its PIN tries, that it takes no PIN until it is re-inserted (getPINRetries' powerCycleState:
  /// three wrong PINs in a row, maybe in another process). Updated by every read of the tries over the session's own
  /// channel; libfido2 does not report it (false then).
  public var powerCycleRequired: Bool { powerCycleState == true }
  /// getPINRetries' powerCycleState as the last read over the session's own channel gave it; nil when the key left
  /// it out (a CTAP 2.0 key) or no such read was made.
  var powerCycleState: Bool?
  /// Whether `knownInfo` came from the getInfo inside the open (no request of ours); for tests and traces.
  public private(set) var infoFromOpen = false

  static let initialized: Void = { fido_init(0) }()

  /// Loads libfido2 (at the first FIDO2 use, not at start-up); call before any libfido2 function.
  public static func loadLibrary() throws(TokenError) {
    do { try SystemLibrary.fido2.load() } catch { throw .libraryMissing(error) }
  }

  /// The virtual keys' sockets that exist: `virtualPaths`, else those named in `TOKENBRIDGE_VIRTUAL_FIDO` (socket
  /// paths separated by `:`).
  static func virtualSockets(_ virtualPaths: [String]?) -> [String] {
    (virtualPaths ?? namedVirtualKeys()).filter { access($0, F_OK) == 0 }  // not FileManager: 2% of a listing's CPU
  }

  /// The socket paths in `TOKENBRIDGE_VIRTUAL_FIDO` (separated by `:`), split as bytes: a String split walks
  /// grapheme clusters (`virtualSockets` with four paths: 119k instructions that way, 48k this way; callgrind).
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

  /// How many keys `list` will name, told without libfido2: the virtual keys plus the hidraw nodes whose report
  /// descriptor declares the FIDO usage page (our test is a superset of libfido2's, so this may count one more,
  /// never fewer). Discovery's PC/SC side needs it while the FIDO2 side is still loading the library.
  public static func expectedKeys(virtualPaths: [String]? = nil) -> Int {
    virtualSockets(virtualPaths).count + HIDReportDescriptor.fidoNodeCount()
  }

  /// Keys present: libfido2's hidraw manifest plus the virtual keys named in `TOKENBRIDGE_VIRTUAL_FIDO`
  /// (socket paths separated by `:`). None when no key is possible (`keysPossible`: libfido2 is then not
  /// loaded) or libfido2 cannot be loaded (`loadLibrary` says why).
  public static func list(virtualPaths: [String]? = nil) -> [FIDO2DeviceRef] {
    let virtual = virtualSockets(virtualPaths)
    guard keysPossible(virtualSockets: virtual), (try? loadLibrary()) != nil else { return [] }
    _ = initialized
    var out: [FIDO2DeviceRef] = []
    if let list = fido_dev_info_new(64) {
      var n = 0
      if fido_dev_info_manifest(list, 64, &n) == FIDO_OK {
        for i in 0..<n {
          guard let di = fido_dev_info_ptr(list, i), let p = fido_dev_info_path(di) else { continue }
          // libfido2 gives "" for a USB device without a product string; `listWithoutLibrary` names it as this does.
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

  /// The keys `list` names, found without libfido2 (for listings, which read keys over `CTAPHIDChannel`): the
  /// hidraw nodes its manifest would list (`HIDReportDescriptor.libfido2Nodes`) and the virtual keys.
  public static func listWithoutLibrary(virtualPaths: [String]? = nil, sys: String = "/sys", dev: String = "/dev")
    -> [FIDO2DeviceRef]
  {
    HIDReportDescriptor.libfido2Nodes(sys: sys, dev: dev).map {
      FIDO2DeviceRef(path: "\(dev)/\($0.node)", product: $0.product ?? "FIDO2 key", isVirtual: false)
    } + virtualSockets(virtualPaths).map { FIDO2DeviceRef(path: $0, product: "virtual FIDO2 key", isVirtual: true) }
  }

  /// Opens the key over the session's own channel (CTAPHID_INIT; nothing else is sent, libfido2 is not loaded).
  public init(_ ref: FIDO2DeviceRef, deadlines: FIDO2Deadlines = .standard, trace: TraceSink? = nil)
    throws(TokenError)
  {
    self.ref = ref
    self.deadlines = deadlines
    self.trace = trace
    io = FIDO2IO.Context(readDeadlineMs: deadlines.probeMs)
    trace?("fido2 > CTAPHID_INIT")
    link = try CTAP2Link(ref, ms: deadlines.probeMs)
  }

  /// libfido2's device for this key: the session's own channel is closed and libfido2 opens the key (CTAPHID_INIT
  /// and getInfo inside it), the first time a call needs it. A closed session (`close()`, until `reopen`) has
  /// neither: the key is taken as gone.
  func device() throws(TokenError) -> OpaquePointer {
    if let dev { return dev }
    guard link != nil else { throw .smartCard(.cardRemoved(reader: ref.path)) }
    try Self.loadLibrary()
    _ = Self.initialized
    link?.close()
    link = nil
    let known = knownInfo
    try open()
    if knownInfo == nil, let known { knownInfo = known }
    return dev!
  }

  /// The session's own channel, for every call but credential management: opened again (CTAPHID_INIT) when
  /// libfido2 had taken the key over (`device()`); a closed session has neither (the key is taken as gone).
  func ownLink() throws(TokenError) -> CTAP2Link {
    if let link { return link }
    guard dev != nil else { throw .smartCard(.cardRemoved(reader: ref.path)) }
    closeDevice()
    let opened = try CTAP2Link(ref, ms: deadlines.probeMs)
    link = opened
    return opened
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
  func call(_ operation: String, _ ms: Int32, _ body: () -> Int32) throws(TokenError) -> Int32 {
    guard let rc = bounded(dev, ms, body) else { throw .noAnswer(operation: operation) }
    return rc
  }

  deinit { closeDevice() }

  /// Opens the device (CTAPHID_INIT, then getInfo inside libfido2), bounded by the probe deadline, through our
  /// own I/O (`VirtualFIDOIO` or `HidrawFIDOIO`), which keeps the getInfo response for `info()`.
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
    io.capturedInfo = nil
    let rc = bounded(d, deadlines.probeMs) { FIDO2IO.opening(with: io) { fido_dev_open(d, path) } }
    guard rc == FIDO_OK else {
      var dd: OpaquePointer? = d
      fido_dev_free(&dd)
      guard let rc else { throw .noAnswer(operation: "open") }
      throw .fido2(rc, operation: "open")
    }
    dev = d
    // libfido2 falls back to U2F when it could not take its getInfo answer (dev.c `fido_dev_open_rx`): then ours
    // is not used either.
    knownInfo = fido_dev_is_fido2(d) ? io.capturedInfo : nil
    infoFromOpen = knownInfo != nil
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
    link?.close()
    link = nil
    guard dev != nil else { return }
    fido_dev_close(dev)
    fido_dev_free(&dev)
    dev = nil
  }

  /// Closes and opens again (after a replug), over the session's own channel.
  public func reopen() throws(TokenError) {
    closeDevice()
    infoChanged()  // a replugged key may have been reset meanwhile
    link = try CTAP2Link(ref, ms: deadlines.probeMs)
  }

  /// Opens the key again at `path` (a replugged hidraw key may come back under another number).
  public func reopen(at path: String) throws(TokenError) {
    closeDevice()
    infoChanged()
    ref.path = path
    link = try CTAP2Link(ref, ms: deadlines.probeMs)
  }

  /// getInfo: what the key answered while opening (no request), or — when that answer could not be read, or a
  /// call since changed it — a getInfo of our own (`refreshInfo`).
  public func info() throws(TokenError) -> FIDO2Info {
    if let knownInfo { return knownInfo }
    return try refreshInfo()
  }

  /// getInfo as far as the session has read it, without asking the key (nil: not read in this session).
  public var infoIfRead: FIDO2Info? { knownInfo }

  /// Forgets the getInfo answer: the key's state changed (PIN set or changed, reset, credentials stored).
  func infoChanged() {
    knownInfo = nil
    infoFromOpen = false
  }

  /// Sends getInfo (`fido_dev_get_cbor_info`) and keeps the answer for `info()`.
  @discardableResult
  public func refreshInfo() throws(TokenError) -> FIDO2Info {
    if dev == nil, let link {
      let info = try linkInfo(link)
      knownInfo = info
      infoFromOpen = false
      return info
    }
    let dev = try device()
    guard let ci = fido_cbor_info_new() else { throw .fido2(FIDO_ERR_INTERNAL, operation: "getInfo") }
    defer {
      var c: OpaquePointer? = ci
      fido_cbor_info_free(&c)
    }
    trace?("fido2 > getInfo")
    let rc = try call("getInfo", deadlines.probeMs) { fido_dev_get_cbor_info(dev, ci) }
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
    knownInfo = info
    infoFromOpen = false
    return info
  }

  /// PIN tries left (getPINRetries; spends none).
  public func pinRetries() throws(TokenError) -> Int {
    if dev == nil, let link { return try linkRetries(link, uv: false) }
    let dev = try device()
    var n: Int32 = 0
    let rc = try call("getPINRetries", deadlines.probeMs) { fido_dev_get_retry_count(dev, &n) }
    guard rc == FIDO_OK else { throw mapped(rc, "getPINRetries") }
    return Int(n)
  }

  /// Built-in user verification tries left (getUVRetries), for keys with UV (fingerprint); nil otherwise.
  public func uvRetries(_ info: FIDO2Info) -> Int? {
    guard info.options["uv"] != nil, let link = try? ownLink() else { return nil }
    return try? linkRetries(link, uv: true)
  }

  /// The PIN status in the shape every token shares; the power-cycle state read with it is `powerCycleRequired`.
  public func pinStatus() throws(TokenError) -> PINStatus {
    // Our getPINRetries reads the power-cycle state too; libfido2's (while it holds the key) does not tell it.
    let ownLink = dev == nil && link != nil
    let left = try pinRetries()
    return PINStatus(kind: .pin, retriesLeft: left, maxRetries: 8, powerCycleRequired: ownLink ? powerCycleState : nil)
  }

  /// setPIN (no PIN yet) or changePIN. A wrong current PIN throws `.wrongPIN` with the tries read afterwards.
  public func setPIN(_ new: [UInt8], old: [UInt8]?) throws(TokenError) {
    try linkSetPIN(try ownLink(), new, old: old)
  }

  /// `Self.error`, except that a transport failure (FIDO_ERR_RX/TX) means removal only when the key is gone: the
  /// virtual key's socket hung up, or the hidraw node disappeared. A key that is there but sent something
  /// libfido2 could not take (a wrong command byte, bad framing) is `.fido2(FIDO_ERR_RX, operation:)`.
  func mapped(_ rc: Int32, _ operation: String) -> TokenError {
    guard rc == FIDO_ERR_RX || rc == FIDO_ERR_TX else { return Self.error(rc, operation) }
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
