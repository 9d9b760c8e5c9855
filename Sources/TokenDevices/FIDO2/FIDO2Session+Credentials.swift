import CFido2
import FoundationEssentials

/// makeCredential / getAssertion with hmac-secret (CTAP 2.1 §6.1, §6.2, §12.5) through libfido2.
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
    if dev == nil, let link {
      return try linkMakeCredential(link, for: owner, clientDataHash: clientDataHash, pin: pin, resident: resident)
    }
    let rpID = owner.rpID
    let dev = try device()
    guard let cred = fido_cred_new() else { throw .fido2(FIDO_ERR_INTERNAL, operation: "makeCredential") }
    defer {
      var c: OpaquePointer? = cred
      fido_cred_free(&c)
    }
    var rc = fido_cred_set_type(cred, COSE_ES256)
    if rc == FIDO_OK { rc = fido_cred_set_clientdata_hash(cred, clientDataHash, clientDataHash.count) }
    if rc == FIDO_OK { rc = fido_cred_set_rp(cred, rpID, owner.rpName) }
    if rc == FIDO_OK {
      rc = fido_cred_set_user(
        cred, owner.userID, owner.userID.count, owner.userName, owner.userDisplayName, nil)
    }
    if rc == FIDO_OK { rc = fido_cred_set_extensions(cred, FIDO_EXT_HMAC_SECRET) }
    if rc == FIDO_OK { rc = fido_cred_set_rk(cred, resident ? FIDO_OPT_TRUE : FIDO_OPT_FALSE) }
    guard rc == FIDO_OK else { throw .fido2(rc, operation: "makeCredential") }
    trace?("fido2 > makeCredential rp=\(rpID) hmac-secret")
    rc = try whileWaitingForTouch("makeCredential") {
      Self.withCString(pin) { fido_dev_make_cred(dev, cred, $0) }
    }
    trace?("fido2 < \(rc == FIDO_OK ? "OK" : String(cString: fido_strerr(rc)))")
    guard rc == FIDO_OK else { throw pinAwareError(rc, "makeCredential") }
    if resident { infoChanged() }  // remainingDiscoverableCredentials went down
    guard let id = fido_cred_id_ptr(cred) else { throw .fido2(FIDO_ERR_INTERNAL, operation: "makeCredential") }
    return Array(UnsafeBufferPointer(start: id, count: fido_cred_id_len(cred)))
  }

  /// An assertion with `credentialID`; returns the decrypted hmac-secret output for `salt` (32 bytes).
  public func hmacSecret(rpID: String, clientDataHash: [UInt8], credentialID: [UInt8], salt: [UInt8], pin: [UInt8]?)
    throws(TokenError) -> [UInt8]
  {
    if dev == nil, let link {
      return try linkHmacSecret(
        link, rpID: rpID, clientDataHash: clientDataHash, credentialID: credentialID, salt: salt, pin: pin)
    }
    let dev = try device()
    guard let a = fido_assert_new() else { throw .fido2(FIDO_ERR_INTERNAL, operation: "getAssertion") }
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
    guard rc == FIDO_OK else { throw .fido2(rc, operation: "getAssertion") }
    trace?("fido2 > getAssertion rp=\(rpID) hmac-secret")
    rc = try whileWaitingForTouch("getAssertion") {
      Self.withCString(pin) { fido_dev_get_assert(dev, a, $0) }
    }
    trace?("fido2 < \(rc == FIDO_OK ? "OK" : String(cString: fido_strerr(rc)))")
    guard rc == FIDO_OK else { throw pinAwareError(rc, "getAssertion") }
    guard let p = fido_assert_hmac_secret_ptr(a, 0), fido_assert_hmac_secret_len(a, 0) == 32 else {
      throw .malformedResponse(operation: "getAssertion hmac-secret")
    }
    return Array(UnsafeBufferPointer(start: p, count: 32))
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

  /// Runs a call that may wait for a touch: the touch cue fires when the key asks (KEEPALIVE UP_NEEDED, seen by
  /// our I/O for virtual and hidraw keys alike), and `cancel()` may stop it meanwhile.
  /// Bounded by `deadlines.userPresenceMs` (`.noAnswer(operation:)` past it).
  func whileWaitingForTouch(_ operation: String, _ body: () -> Int32) throws(TokenError) -> Int32 {
    io.touchCue = touchCue
    if let dev { canceller.arm(dev) }
    defer {
      canceller.disarm()
      io.touchCue = nil
    }
    return try call(operation, deadlines.userPresenceMs, body)
  }

  /// A wrong PIN reports the tries left, read right after.
  func pinAwareError(_ rc: Int32, _ operation: String) -> TokenError {
    if rc == FIDO_ERR_PIN_INVALID { return .wrongPIN(.pin, retriesLeft: (try? pinRetries()) ?? 0) }
    // libfido2 reports a failed key-agreement step as FIDO_ERR_INTERNAL: a key that no longer answers is gone.
    if rc == FIDO_ERR_INTERNAL {
      do { _ = try pinRetries() } catch .noAnswer { return .noAnswer(operation: operation) } catch {
        return .smartCard(.cardRemoved(reader: ref.path))
      }
    }
    return mapped(rc, operation)
  }
}
