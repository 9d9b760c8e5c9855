import CFido2
import FoundationEssentials

/// A discoverable (resident) credential as credential management lists it (CTAP 2.1 §6.8).
public struct FIDO2ResidentCredential: Sendable, Equatable, Codable {
  public var rpID: String
  public var rpName: String?
  public var userID: [UInt8]
  public var userName: String?
  public var userDisplayName: String?
  public var credentialID: [UInt8]

  public init(
    rpID: String, rpName: String?, userID: [UInt8], userName: String?, userDisplayName: String?,
    credentialID: [UInt8]
  ) {
    self.rpID = rpID
    self.rpName = rpName
    self.userID = userID
    self.userName = userName
    self.userDisplayName = userDisplayName
    self.credentialID = credentialID
  }
}

/// Reset, the silent credential probe and credential management, through libfido2 (fido_dev_reset,
/// fido_dev_get_assert, fido_credman_*: libfido2 1.12 sends the preview command 0x41, which CTAP 2.1 keys still
/// accept).
extension FIDO2Session {
  /// Lets go of the device (before it is unplugged); `reopen()` opens it again.
  public func close() { closeDevice() }

  /// authenticatorReset (CTAP 2.1 §6.6). The key takes it only within a few seconds of power-up (10 s in the
  /// specification) and wants a touch: `touchCue` fires when it asks. A key past the window refuses with
  /// NOT_ALLOWED: `.resetNotAllowed`, nothing erased.
  public func reset() throws(TokenError) {
    trace?("fido2 > reset")
    let rc = try whileWaitingForTouch("reset") { fido_dev_reset($0) }
    trace?("fido2 < \(rc == FIDO_OK ? "OK" : String(cString: fido_strerr(rc)))")
    switch rc {
    case FIDO_OK:
      infoChanged()  // no PIN, no credentials
      coolDown.pinAccepted(for: ref)  // a new PIN starts with a clean count
    case FIDO_ERR_NOT_ALLOWED: throw .resetNotAllowed
    default: throw mapped(rc, "reset")
    }
  }

  /// Whether this key knows `credentialID` for `rpID`: a getAssertion with up=false and no PIN (CTAP 2.1 §6.2:
  /// "silent" — no touch, no PIN try spent, nothing signed that anyone keeps). A credential ID made by one key
  /// is not accepted by another (non-resident IDs are wrapped by the key's own secret), so this tells two keys of
  /// the same model apart.
  public func knowsCredential(rpID: String, credentialID: [UInt8]) throws(TokenError) -> Bool {
    guard let a = fido_assert_new() else { throw .fido2(FIDO_ERR_INTERNAL, operation: "getAssertion") }
    defer {
      var x: OpaquePointer? = a
      fido_assert_free(&x)
    }
    let cdh = [UInt8](repeating: 0, count: 32)
    var rc = fido_assert_set_clientdata_hash(a, cdh, cdh.count)
    if rc == FIDO_OK { rc = fido_assert_set_rp(a, rpID) }
    if rc == FIDO_OK { rc = fido_assert_allow_cred(a, credentialID, credentialID.count) }
    if rc == FIDO_OK { rc = fido_assert_set_up(a, FIDO_OPT_FALSE) }
    guard rc == FIDO_OK else { throw .fido2(rc, operation: "getAssertion") }
    trace?("fido2 > getAssertion rp=\(rpID) up=false (probe)")
    rc = try call("getAssertion", deadlines.commandMs) { fido_dev_get_assert($0, a, nil) }
    trace?("fido2 < \(rc == FIDO_OK ? "OK" : String(cString: fido_strerr(rc)))")
    switch rc {
    case FIDO_OK: return true
    case FIDO_ERR_NO_CREDENTIALS, FIDO_ERR_INVALID_CREDENTIAL: return false
    default: throw mapped(rc, "getAssertion")
    }
  }

  /// getCredsMetadata: discoverable credentials stored and how many more fit (PIN needed).
  public func credentialMetadata(pin: [UInt8]) throws(TokenError) -> (existing: Int, remaining: Int) {
    guard let m = fido_credman_metadata_new() else { throw .fido2(FIDO_ERR_INTERNAL, operation: "getCredsMetadata") }
    defer {
      var x: OpaquePointer? = m
      fido_credman_metadata_free(&x)
    }
    trace?("fido2 > credentialManagement getCredsMetadata <PIN redacted>")
    let rc = try call("getCredsMetadata", deadlines.commandMs) { dev in
      Self.withCString(pin) { fido_credman_get_dev_metadata(dev, m, $0) }
    }
    trace?("fido2 < \(rc == FIDO_OK ? "OK" : String(cString: fido_strerr(rc)))")
    guard rc == FIDO_OK else { throw pinAwareError(rc, "getCredsMetadata") }
    return (Int(fido_credman_rk_existing(m)), Int(fido_credman_rk_remaining(m)))
  }

  /// Every discoverable credential: enumerateRPs, then enumerateCredentials per RP (PIN needed; libfido2
  /// asks the key for a token with the cm permission for each call).
  public func residentCredentials(pin: [UInt8]) throws(TokenError) -> [FIDO2ResidentCredential] {
    guard let rps = fido_credman_rp_new() else { throw .fido2(FIDO_ERR_INTERNAL, operation: "enumerateRPs") }
    defer {
      var x: OpaquePointer? = rps
      fido_credman_rp_free(&x)
    }
    trace?("fido2 > credentialManagement enumerateRPs <PIN redacted>")
    var rc = try call("enumerateRPs", deadlines.commandMs) { dev in
      Self.withCString(pin) { fido_credman_get_dev_rp(dev, rps, $0) }
    }
    trace?("fido2 < \(rc == FIDO_OK ? "OK" : String(cString: fido_strerr(rc)))")
    if rc == FIDO_ERR_NO_CREDENTIALS { return [] }
    // A key with no discoverable credential may answer enumerateRPs with success and an empty body (solo1 4.1.5,
    // HardwareNotes.md), which libfido2 cannot read as a count: when the key's own metadata says it holds none,
    // that is the answer.
    if [FIDO_ERR_RX, FIDO_ERR_RX_NOT_CBOR, FIDO_ERR_RX_INVALID_CBOR, FIDO_ERR_INVALID_CBOR].contains(rc),
      (try? credentialMetadata(pin: pin))?.existing == 0
    {
      return []
    }
    guard rc == FIDO_OK else { throw pinAwareError(rc, "enumerateRPs") }
    var out: [FIDO2ResidentCredential] = []
    for i in 0..<fido_credman_rp_count(rps) {
      guard let idPtr = fido_credman_rp_id(rps, i) else { continue }
      let rpID = String(cString: idPtr)
      let rpName = fido_credman_rp_name(rps, i).map { String(cString: $0) }
      guard let rks = fido_credman_rk_new() else { throw .fido2(FIDO_ERR_INTERNAL, operation: "enumerateCredentials") }
      defer {
        var x: OpaquePointer? = rks
        fido_credman_rk_free(&x)
      }
      trace?("fido2 > credentialManagement enumerateCredentials rp=\(rpID) <PIN redacted>")
      rc = try call("enumerateCredentials", deadlines.commandMs) { dev in
        Self.withCString(pin) { fido_credman_get_dev_rk(dev, rpID, rks, $0) }
      }
      trace?("fido2 < \(rc == FIDO_OK ? "OK" : String(cString: fido_strerr(rc)))")
      if rc == FIDO_ERR_NO_CREDENTIALS { continue }
      guard rc == FIDO_OK else { throw pinAwareError(rc, "enumerateCredentials") }
      for j in 0..<fido_credman_rk_count(rks) {
        guard let cred = fido_credman_rk(rks, j) else { continue }
        func bytes(_ p: UnsafePointer<UInt8>?, _ n: Int) -> [UInt8] {
          guard let p else { return [] }
          return Array(UnsafeBufferPointer(start: p, count: n))
        }
        out.append(
          FIDO2ResidentCredential(
            rpID: rpID, rpName: rpName,
            userID: bytes(fido_cred_user_id_ptr(cred), fido_cred_user_id_len(cred)),
            userName: fido_cred_user_name(cred).map { String(cString: $0) },
            userDisplayName: fido_cred_display_name(cred).map { String(cString: $0) },
            credentialID: bytes(fido_cred_id_ptr(cred), fido_cred_id_len(cred))))
      }
    }
    return out
  }

  /// deleteCredential (PIN needed). An ID the key does not hold: `.noCredential`.
  public func deleteResidentCredential(_ credentialID: [UInt8], pin: [UInt8]) throws(TokenError) {
    trace?("fido2 > credentialManagement deleteCredential <PIN redacted>")
    let rc = try call("deleteCredential", deadlines.commandMs) { dev in
      Self.withCString(pin) { fido_credman_del_dev_rk(dev, credentialID, credentialID.count, $0) }
    }
    trace?("fido2 < \(rc == FIDO_OK ? "OK" : String(cString: fido_strerr(rc)))")
    guard rc == FIDO_OK else { throw pinAwareError(rc, "deleteCredential") }
    infoChanged()  // remainingDiscoverableCredentials went up
  }
}
