import CFido2
import FoundationEssentials
import Platform

/// makeCredential / getAssertion with hmac-secret (CTAP 2.1 §6.1, §6.2, §12.5), through libfido2
/// (`fido_dev_make_cred`, `fido_dev_get_assert`: libfido2 picks the PIN protocol and the kind of PIN token from the
/// key's getInfo, e.g. the legacy getPinToken for a key without `pinUvAuthToken`).
/// The relying party and user a credential is made for (CTAP 2.1 §6.1: rp, user); the caller names them.
public struct FIDO2CredentialOwner: Sendable, Equatable {
  public var rpID: String
  public var rpName: String
  public var userID: [UInt8]
  public var userName: String
  public var userDisplayName: String

  public init(rpID: String, rpName: String, userID: [UInt8], userName: String, userDisplayName: String) {
    self.rpID = rpID
    self.rpName = rpName
    self.userID = userID
    self.userName = userName
    self.userDisplayName = userDisplayName
  }
}

extension FIDO2Session {
  /// Creates an ES256 credential with hmac-secret for `owner` (discoverable when `resident`); returns its ID.
  /// `pin` (UTF-8, NFC) nil: no user verification (the key may still want a touch).
  public func makeCredential(
    for owner: FIDO2CredentialOwner, clientDataHash: [UInt8], pin: [UInt8]?, resident: Bool = false
  ) throws(TokenError) -> [UInt8] {
    let operation = "makeCredential"
    guard let cred = fido_cred_new() else { throw .fido2(FIDO_ERR_INTERNAL, operation: operation) }
    defer {
      var c: OpaquePointer? = cred
      fido_cred_free(&c)
    }
    var rc = fido_cred_set_type(cred, COSE_ES256)
    if rc == FIDO_OK { rc = fido_cred_set_clientdata_hash(cred, clientDataHash, clientDataHash.count) }
    if rc == FIDO_OK { rc = fido_cred_set_rp(cred, owner.rpID, owner.rpName) }
    if rc == FIDO_OK {
      rc = fido_cred_set_user(
        cred, owner.userID, owner.userID.count, owner.userName, owner.userDisplayName, nil)
    }
    if rc == FIDO_OK { rc = fido_cred_set_extensions(cred, FIDO_EXT_HMAC_SECRET) }
    if rc == FIDO_OK { rc = fido_cred_set_rk(cred, resident ? FIDO_OPT_TRUE : FIDO_OPT_OMIT) }
    guard rc == FIDO_OK else { throw .fido2(rc, operation: operation) }
    trace?(
      "fido2 > makeCredential rp=\(owner.rpID) hmac-secret\(resident ? " rk" : "")\(pin == nil ? "" : " <PIN redacted>")"
    )
    rc = try whileWaitingForTouch(operation) { dev in
      Self.withCString(pin) { fido_dev_make_cred(dev, cred, $0) }
    }
    trace?("fido2 < \(rc == FIDO_OK ? "OK" : String(cString: fido_strerr(rc)))")
    guard rc == FIDO_OK else { throw pinAwareError(rc, operation) }
    if pin != nil { coolDown.pinAccepted(for: ref) }
    if resident { infoChanged() }  // remainingDiscoverableCredentials went down
    guard let id = fido_cred_id_ptr(cred), fido_cred_id_len(cred) > 0 else {
      throw .malformedResponse(operation: operation)
    }
    return Array(UnsafeBufferPointer(start: id, count: fido_cred_id_len(cred)))
  }

  /// An assertion with `credentialID`; returns the decrypted hmac-secret output for `salt` (32 bytes).
  public func hmacSecret(rpID: String, clientDataHash: [UInt8], credentialID: [UInt8], salt: [UInt8], pin: [UInt8]?)
    throws(TokenError) -> [UInt8]
  {
    let operation = "getAssertion"
    guard salt.count == 32, clientDataHash.count == 32 else {
      throw .fido2(FIDO_ERR_INVALID_ARGUMENT, operation: operation)
    }
    guard let a = fido_assert_new() else { throw .fido2(FIDO_ERR_INTERNAL, operation: operation) }
    defer {
      var x: OpaquePointer? = a
      fido_assert_free(&x)
    }
    var rc = fido_assert_set_clientdata_hash(a, clientDataHash, clientDataHash.count)
    if rc == FIDO_OK { rc = fido_assert_set_rp(a, rpID) }
    if rc == FIDO_OK { rc = fido_assert_allow_cred(a, credentialID, credentialID.count) }
    if rc == FIDO_OK { rc = fido_assert_set_extensions(a, FIDO_EXT_HMAC_SECRET) }
    if rc == FIDO_OK { rc = fido_assert_set_hmac_salt(a, salt, salt.count) }
    if rc == FIDO_OK { rc = fido_assert_set_up(a, FIDO_OPT_TRUE) }
    guard rc == FIDO_OK else { throw .fido2(rc, operation: operation) }
    trace?("fido2 > getAssertion rp=\(rpID) hmac-secret\(pin == nil ? "" : " <PIN redacted>")")
    rc = try whileWaitingForTouch(operation) { dev in
      Self.withCString(pin) { fido_dev_get_assert(dev, a, $0) }
    }
    trace?("fido2 < \(rc == FIDO_OK ? "OK" : String(cString: fido_strerr(rc)))")
    guard rc == FIDO_OK else { throw pinAwareError(rc, operation) }
    if pin != nil { coolDown.pinAccepted(for: ref) }
    guard fido_assert_count(a) == 1, let p = fido_assert_hmac_secret_ptr(a, 0), fido_assert_hmac_secret_len(a, 0) == 32
    else { throw .malformedResponse(operation: "getAssertion hmac-secret") }
    // UV must have happened when a PIN authorized it: the output is then CredRandomWithUV's (CTAP 2.1 §12.5).
    guard pin == nil || fido_assert_flags(a, 0) & 0x04 != 0 else {
      throw .malformedResponse(operation: "getAssertion hmac-secret (no user verification)")
    }
    return Array(UnsafeBufferPointer(start: p, count: 32))
  }

  /// Runs a call that may wait for a touch: the touch cue fires when the key asks (KEEPALIVE UP_NEEDED, seen by
  /// our I/O for virtual and hidraw keys alike), and `canceller.cancel()` may stop it meanwhile
  /// (`fido_dev_cancel`). Bounded by `deadlines.userPresenceMs` (`.noAnswer(operation:)` past it).
  func whileWaitingForTouch(_ operation: String, _ body: (OpaquePointer) -> Int32) throws(TokenError) -> Int32 {
    let dev = try device()
    io.touchCue = touchCue
    canceller.arm(dev)
    io.canceller = canceller
    defer {
      canceller.disarm()
      io.canceller = nil
      io.touchCue = nil
    }
    return try call(operation, deadlines.userPresenceMs, body)
  }

  /// Runs `body` with a secret as a NUL-terminated C string (nil stays nil), in a buffer zeroed afterwards.
  static func withCString<T>(_ secret: [UInt8]?, _ body: (UnsafePointer<CChar>?) -> T) -> T {
    guard let secret else { return body(nil) }
    var buffer = secret + [0]
    defer { wipe(&buffer) }
    return buffer.withUnsafeBufferPointer { b in
      b.withMemoryRebound(to: CChar.self) { body($0.baseAddress) }
    }
  }

  /// A wrong PIN reports the tries left, read right after (which tells the cool-down memory of the attempt); a
  /// key that refuses every PIN until it is re-inserted is remembered as such (`FIDO2CoolDown`).
  func pinAwareError(_ rc: Int32, _ operation: String) -> TokenError {
    if rc == FIDO_ERR_PIN_INVALID { return .wrongPIN(.pin, retriesLeft: (try? pinRetries()) ?? 0) }
    if rc == FIDO_ERR_PIN_AUTH_BLOCKED { coolDown.authBlocked(for: ref) }
    // A PIN token refused for its policy although no PIN is being set: the PIN was right, but the key wants it
    // changed first (forcePINChange; CTAP 2.1 §6.5.5.7).
    if rc == FIDO_ERR_PIN_POLICY_VIOLATION, operation != "setPIN", operation != "changePIN" {
      return .pinChangeRequired
    }
    // libfido2 reports a failed key-agreement step as FIDO_ERR_INTERNAL: a key that no longer answers is gone.
    if rc == FIDO_ERR_INTERNAL {
      do { _ = try pinRetries() } catch .noAnswer { return .noAnswer(operation: operation) } catch {
        return .smartCard(.cardRemoved(reader: ref.path))
      }
    }
    return mapped(rc, operation)
  }
}
