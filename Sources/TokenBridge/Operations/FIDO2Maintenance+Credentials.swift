import FoundationEssentials
import Platform
import TokenDevices
import UAFCore

/// A discoverable credential on a key, with whether TokenBridge made it.
public struct FIDO2CredentialListing: Codable, Sendable, Equatable {
  public var credential: FIDO2ResidentCredential
  /// The credential ID, base64url (what `fido2 credentials delete` takes).
  public var id: String
  /// Made by TokenBridge: its RP is TokenBridge's own, or a registration in local data holds its ID.
  public var createdByTokenBridge: Bool
  /// The local registrations (KeyIDs) that use it.
  public var registrations: [String]
}

extension FIDO2Maintenance {
  /// Lists the discoverable credentials (PIN through the PIN-attempt engine).
  public func credentials(_ key: DiscoveredFIDO2, verifier: PinUserVerifier) throws(OperationError)
    -> [FIDO2CredentialListing]
  {
    try requireCredentialManagement(key)
    let session = key.session
    let creds = try FIDO2Authenticator.withPIN(
      key: key, timeout: interactionTimeout, purpose: "list the credentials on the key", verifier: verifier
    ) { (pin) throws(TokenError) in try session.residentCredentials(pin: pin) }
    return try annotate(creds)
  }

  /// Deletes the discoverable credential `id` (base64url or hex) after `confirm` said yes to it. Returns it.
  public func deleteCredential(
    _ key: DiscoveredFIDO2, id: String, verifier: PinUserVerifier,
    confirm: (FIDO2CredentialListing) throws -> Bool
  ) throws(OperationError) -> FIDO2CredentialListing {
    try requireCredentialManagement(key)
    let session = key.session
    // The PIN is kept (wiped when released) so the user types it once for the listing and the deletion.
    let (pin, creds) = try FIDO2Authenticator.withPIN(
      key: key, timeout: interactionTimeout, purpose: "delete a credential on the key", verifier: verifier
    ) { (pin) throws(TokenError) in (Secret(pin), try session.residentCredentials(pin: pin)) }
    let wanted = Self.credentialIDBytes(id)
    guard let hit = try annotate(creds).first(where: { Array($0.credential.credentialID) == wanted }) else {
      throw .token(.noCredential(operation: "deleteCredential"))
    }
    let yes: Bool
    do { yes = try confirm(hit) } catch { throw mapInteraction(error) }
    guard yes else { throw .declined }
    // Durable intent before the deletion: a kill between it and the local removal is finished at the next start.
    let dependents: [AuthenticatorRecord]
    do {
      dependents = try localData.authenticators(includeAll: true).filter { hit.registrations.contains($0.keyID) }
    } catch { throw .localData(error) }
    let intent: Int64
    do {
      intent = try localData.beginIntent(.fido2CredentialDeletion, tokenID: key.info.id, dependents: dependents)
    } catch { throw .localData(error) }
    do { try session.deleteResidentCredential(hit.credential.credentialID, pin: pin.bytes) } catch {
      throw .token(error)  // the intent stays: the next start asks the key whether the credential went
    }
    // The local registrations that used it cannot sign any more: forget them (the server is not told; the user
    // can deregister those accounts).
    for k in hit.registrations { try? localData.delete(k) }
    try? localData.clearIntent(intent)
    return hit
  }

  /// A key that cannot manage credentials (or a missing libfido2) is said before the PIN is asked.
  func requireCredentialManagement(_ key: DiscoveredFIDO2) throws(OperationError) {
    let info: FIDO2Info
    do {
      try FIDO2Session.loadLibrary()
      info = try key.session.info()
    } catch { throw .token(error) }
    guard info.options["credMgmt"] == true || info.options["credentialMgmtPreview"] == true else {
      throw .token(.unsupported("credential management (CTAP 2.1 credMgmt)"))
    }
  }

  func annotate(_ creds: [FIDO2ResidentCredential]) throws(OperationError) -> [FIDO2CredentialListing] {
    let records: [AuthenticatorRecord]
    do { records = try localData.authenticators(includeAll: true) } catch { throw .localData(error) }
    return creds.map { c in
      let regs = records.filter { $0.credentialID.map(Array.init) == c.credentialID }.map(\.keyID)
      return FIDO2CredentialListing(
        credential: c, id: Base64URL.encode(c.credentialID),
        createdByTokenBridge: c.rpID == FIDO2Authenticator.rpID || !regs.isEmpty, registrations: regs)
    }
  }

  /// A credential ID as typed: base64url (as listed) or hex.
  static func credentialIDBytes(_ s: String) -> [UInt8]? {
    let t = Trim.whitespace(s, newlines: false)
    if t.count % 2 == 0, t.allSatisfy(\.isHexDigit) {
      var out: [UInt8] = []
      var i = t.startIndex
      while i < t.endIndex {
        let j = t.index(i, offsetBy: 2)
        guard let b = UInt8(t[i..<j], radix: 16) else { return nil }
        out.append(b)
        i = j
      }
      return out
    }
    return Base64URL.decode(t)
  }
}
