import CFido2
import FoundationEssentials

/// makeCredential / getAssertion with hmac-secret (CTAP 2.1 §6.1, §6.2, §12.5), over the session's own channel
/// (`FIDO2Session+OwnCTAP`).
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
    try linkMakeCredential(
      try ownLink(), for: owner, clientDataHash: clientDataHash, pin: pin, resident: resident)
  }

  /// An assertion with `credentialID`; returns the decrypted hmac-secret output for `salt` (32 bytes).
  public func hmacSecret(rpID: String, clientDataHash: [UInt8], credentialID: [UInt8], salt: [UInt8], pin: [UInt8]?)
    throws(TokenError) -> [UInt8]
  {
    try linkHmacSecret(
      try ownLink(), rpID: rpID, clientDataHash: clientDataHash, credentialID: credentialID, salt: salt, pin: pin)
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
