import FoundationEssentials
import Platform
import SystemCrypto
import TokenDevices

/// Key generation and signing on a PIV token, from the client library (the CLI only wires prompts).
public struct PIVKeys {
  public var token: DiscoveredToken
  public init(token: DiscoveredToken) { self.token = token }

  /// Generates a P-256 key in `slot`. Asks `confirmOverwrite` when the slot already holds a key (unless
  /// `force`). For a PIN-protected management key the PIN is asked through `verifier`.
  /// Returns the public key (uncompressed point).
  public func generate(
    slot: PIVSlot, managementKey: ManagementKeySource, force: Bool, verifier: PinUserVerifier,
    confirmOverwrite: (PIVSlot) throws -> Bool
  ) throws(OperationError) -> [UInt8] {
    let session = token.session
    let occupied: Bool
    do { occupied = try session.slotIsOccupied(slot) } catch { throw .token(error) }
    if occupied && !force {
      let yes: Bool
      do { yes = try confirmOverwrite(slot) } catch { throw mapInteraction(error) }
      guard yes else { throw .slotOccupied(slot) }
    }
    let generate = { () throws(TokenError) -> [UInt8] in try session.generateKey(slot, algorithm: .eccP256) }
    if case .pinProtected = managementKey {
      return try PinVerification(purpose: "unlock the management key").run(on: token, verifier: verifier) {
        (pin) throws(TokenError) -> [UInt8] in
        try session.authenticateManagementKey(.pinProtected, pin: pin.bytes)
        return try generate()
      }
    }
    do {
      return try session.transact { () throws(TokenError) -> [UInt8] in
        try session.authenticateManagementKey(managementKey)
        return try generate()
      }
    } catch { throw .token(error) }
  }

  /// Signs SHA-256(`message`) with the P-256 key in `slot` after PIN verification.
  /// Returns the DER ECDSA signature.
  public func sign(slot: PIVSlot, message: [UInt8], verifier: PinUserVerifier) throws(OperationError) -> [UInt8] {
    try OperationError.needCrypto()
    let digest = Array(SHA256.hash(data: message))
    return try PinVerification(purpose: "sign with slot \(slot)").run(on: token, verifier: verifier) {
      (_) throws(TokenError) -> [UInt8] in
      try token.session.sign(slot, digest: digest)
    }
  }

  /// The public key in `slot`: GET METADATA where the card answers it, else the slot's certificate. An empty
  /// slot is `.token(.slotEmpty)`; a key this card cannot show (no GET METADATA, no certificate: standard PIV
  /// has no command that reads a public key back) is `.token(.unsupported)`, saying so.
  public func publicKey(slot: PIVSlot) throws(OperationError) -> [UInt8] {
    let found: (key: [UInt8]?, source: PIVSession.PublicKeySource?, slotEmptyIsKnown: Bool)
    do { found = try token.session.publicKey(slot) } catch { throw .token(error) }
    if let key = found.key { return key }
    if found.slotEmptyIsKnown { throw .token(.slotEmpty(slot.rawValue)) }
    throw .token(
      .unsupported(
        "showing the public key of slot \(slot): it has no GET METADATA (a YubiKey extension) and the slot holds "
          + "no certificate, or no key at all; `tokenbridge key generate` prints the public key when it makes one"))
  }

  /// A management key given as hex (from `--management-key-fd`); the secret's bytes stay in `Secret`s.
  public static func managementKey(hex line: Secret) throws(OperationError) -> ManagementKeySource {
    let text = Trim.whitespace(String(decoding: line.bytes, as: UTF8.self), newlines: false)
    guard var key = [UInt8](hex: text), [16, 24, 32].contains(key.count) else { throw .input(.badManagementKey) }
    defer { wipe(&key) }
    return .key(key)
  }
}
