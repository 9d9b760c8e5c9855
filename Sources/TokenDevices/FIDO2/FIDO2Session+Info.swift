import CFido2
import Platform

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

/// getInfo (CTAP 2.1 §6.4 authenticatorGetInfo), read once per session.
extension FIDO2Session {
  /// getInfo (`fido_dev_get_cbor_info`), read once per session; again after a call that changed what it says.
  public func info() throws(TokenError) -> FIDO2Info {
    if let knownInfo { return knownInfo }
    return try refreshInfo()
  }

  /// getInfo as far as the session has read it, without asking the key (nil: not read in this session).
  public var infoIfRead: FIDO2Info? { knownInfo }

  /// Forgets the getInfo answer: the key's state changed (PIN set or changed, reset, credentials stored).
  func infoChanged() { knownInfo = nil }

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
}
