import SystemCrypto
import FoundationEssentials
import TokenDevices
import UAFCore

/// A PIV token as a UAF authenticator: a fresh P-256 key per registration in a slot of ours (retired slots
/// 82-95 by default), signatures made by the card over SHA-256 of the KRD / SIGNED_DATA after PIN verification.
/// Key protection HARDWARE|SECURE_ELEMENT, user verification PASSCODE, attachment EXTERNAL|WIRED.
/// A token acting as a UAF authenticator (PIV card or FIDO2 key).
public protocol TokenAuthenticator {
  var aaid: String { get }
  var tokenInfo: TokenInfo { get }
  func describe(keyIDs: [String]) -> AuthenticatorDescription
  func register(
    username: String, server: String, appID: String, finalChallengeHash: [UInt8], verifier: PinUserVerifier
  ) throws(OperationError) -> (assertion: [UInt8], keyID: String)
  func authenticate(
    record: AuthenticatorRecord, finalChallengeHash: [UInt8], transaction: (text: String, bytes: [UInt8])?,
    verifier: PinUserVerifier
  ) throws(OperationError) -> [UInt8]
  func destroyKey(_ record: AuthenticatorRecord, verifier: PinUserVerifier) throws(OperationError)
}

public final class PIVAuthenticator: TokenAuthenticator {
  public var tokenInfo: TokenInfo { token.info }
  public let token: DiscoveredToken
  public let aaid: String
  let slots: [PIVSlot]
  let localData: LocalData
  let attestationSlot: PIVSlot?

  public init(token: DiscoveredToken, configuration: Configuration, localData: LocalData) {
    self.token = token
    self.aaid = configuration.pivAAID
    let attestation = configuration.attestationSlot.flatMap(PIVSlot.init(string:))
    self.attestationSlot = attestation
    self.slots = configuration.pivSlots.compactMap(PIVSlot.init(string:)).filter { $0 != attestation }
    self.localData = localData
  }

  public func describe(keyIDs: [String] = []) -> AuthenticatorDescription {
    AuthenticatorProfile.description(
      .piv, aaid: aaid,
      attestationTypes: [
        attestationSlot == nil ? UAFConstant.attestationBasicSurrogate : UAFConstant.attestationBasicFull
      ], keyIDs: keyIDs)
  }

  /// The attestation certificate (DER) of the configured slot: certificate object `70` inside `53`.
  func attestationCertificate(_ slot: PIVSlot) throws(TokenError) -> [UInt8] {
    guard let obj = try token.session.readObject(slot.certificateObject), let der = BERTLV.find(0x70, in: obj),
      der.first == 0x30
    else { throw .unsupported("basic full attestation: slot \(slot) has no certificate") }
    // A certificate from the card goes into a UAF TLV (at most 65535 bytes with the rest of the assertion);
    // PIV objects hold a few KB, so anything over 16 KiB is a card that lies, not a certificate.
    guard der.count <= 16 * 1024 else { throw .malformedResponse(operation: "attestation certificate") }
    return der
  }

  /// Reserves a slot for a new key and writes `record` there as pending: a slot of ours left free first, else a
  /// configured slot that is empty on the card (a slot holding a key we did not make is never touched). The
  /// card is read before the locked reservation, which re-checks the local data: if another run took the slot
  /// meanwhile, the next one is tried.
  func reserveSlot(_ record: AuthenticatorRecord) throws(OperationError) -> PIVSlot {
    let configured = slots.map { Int($0.rawValue) }
    var notOurs = Set<Int>()  // holding a key we did not make
    for _ in 0...configured.count {
      let owned: [Int: SlotAssignment]
      do { owned = try localData.slotAssignments(tokenID: token.info.id) } catch { throw .localData(error) }
      var candidates = configured.filter { owned[$0]?.isFree == true }
      if candidates.isEmpty {
        for s in configured where owned[s] == nil && !notOurs.contains(s) {
          do {
            if try token.session.slotIsOccupied(PIVSlot(rawValue: UInt8(s))) {
              notOurs.insert(s)
            } else {
              candidates = [s]
              break
            }
          } catch { throw .token(error) }
        }
      }
      if candidates.isEmpty { break }
      do {
        if let s = try localData.reserveSlot(candidates: candidates, record: record) {
          return PIVSlot(rawValue: UInt8(s))
        }
      } catch { throw .localData(error) }
    }
    throw .noFreeSlot(token.info.id)
  }

  func managementKey() throws(TokenError) -> ManagementKeySource {
    try token.session.hasPINProtectedManagementKey() ? .pinProtected : .defaultKey
  }

  /// Makes the key and the registration assertion. The record is written as pending first, so an interrupted
  /// run leaves a slot we know about (repaired at the next start), never an unknown key on the token.
  public func register(
    username: String, server: String, appID: String, finalChallengeHash: [UInt8], verifier: PinUserVerifier
  ) throws(OperationError) -> (assertion: [UInt8], keyID: String) {
    let keyIDBytes = (0..<32).map { _ in UInt8.random(in: 0...255) }
    let keyID = Base64URL.encode(keyIDBytes)
    let record = AuthenticatorRecord(
      keyID: keyID, aaid: aaid, username: username, server: server, appID: appID, tokenID: token.info.id,
      slot: -1 /* chosen by the reservation */, publicKey: Data(), signCounter: 0, state: .pending,
      createdAt: Date(), credentialID: nil, hmacSalt: nil)
    let before: [Int: SlotAssignment]
    do { before = try localData.slotAssignments(tokenID: token.info.id) } catch { throw .localData(error) }
    let slot = try reserveSlot(record)
    let wasOurs = before[Int(slot.rawValue)] != nil
    let session = token.session
    let data = localData
    let aaid = self.aaid
    // Set once GENERATE ASYMMETRIC KEY was sent: from then on the slot may hold a key of ours.
    var keySent = false
    do {
      return try PinVerification(purpose: "register \(username)").run(on: token, verifier: verifier) {
        (pin) throws(TokenError) -> ([UInt8], String) in
        let source = try managementKey()
        try session.authenticateManagementKey(source, pin: pin.bytes)
        keySent = true
        let point = try session.generateKey(slot, algorithm: .eccP256)
        try? data.setPublicKey(keyID, point)
        let krd = RegistrationAssertion.keyRegistrationData(
          aaid: aaid,
          info: AssertionInfo(authenticationMode: 1, publicKeyAlgAndEncoding: UAFAlgorithm.eccX962Raw),
          finalChallengeHash: finalChallengeHash, keyID: keyIDBytes, publicKey: point)
        let digest = Array(SHA256.hash(data: krd))
        if let att = attestationSlot {  // basic full: signed by the operator's attestation key
          let cert = try attestationCertificate(att)
          let signature = try session.sign(att, digest: digest)
          return (RegistrationAssertion.assemble(krd: krd, signature: signature, certificates: [cert]), keyID)
        }
        let signature = try session.sign(slot, digest: digest)  // surrogate: signed by the new key
        return (RegistrationAssertion.assemble(krd: krd, signature: signature), keyID)
      }
    } catch {
      // Nothing reached the slot (a refused PIN, a cancel): the claim goes with the record, unless the slot was
      // ours already. Otherwise the slot stays ours, free, its key dead.
      if keySent || wasOurs { try? localData.abandon(keyID) } else { try? localData.release(keyID) }
      throw error
    }
  }

  /// Signs an authentication assertion with the key of `record`.
  public func authenticate(
    record: AuthenticatorRecord, finalChallengeHash: [UInt8], transaction: (text: String, bytes: [UInt8])?,
    verifier: PinUserVerifier
  ) throws(OperationError) -> [UInt8] {
    guard let keyIDBytes = Base64URL.decode(record.keyID) else { throw .localData(.notFound(record.keyID)) }
    let counter: UInt32
    do { counter = try localData.nextSignCounter(record.keyID) } catch { throw .localData(error) }
    let nonce = (0..<8).map { _ in UInt8.random(in: 0...255) }
    let signedData = AuthenticationAssertion.signedData(
      aaid: aaid, info: AssertionInfo(authenticationMode: transaction == nil ? 1 : 2), nonce: nonce,
      finalChallengeHash: finalChallengeHash,
      transactionContentHash: transaction.map { Array(SHA256.hash(data: $0.bytes)) } ?? [], keyID: keyIDBytes,
      signCounter: counter)
    let slot = PIVSlot(rawValue: UInt8(record.slot))
    let session = token.session
    let signature = try PinVerification(
      purpose: "sign in as \(record.username)",
      transactionText: transaction.map { TransactionContent.sanitized($0.text) }
    ).run(on: token, verifier: verifier) { (_) throws(TokenError) -> [UInt8] in
      try session.sign(slot, digest: Array(SHA256.hash(data: signedData)))
    }
    return AuthenticationAssertion.assemble(signedData: signedData, signature: signature)
  }

  /// Destroys the key of `record` by generating a throwaway key over it (PIV cannot delete a key) and keeps
  /// the slot as ours. Needs the management key (and the PIN if it is PIN-protected).
  public func destroyKey(_ record: AuthenticatorRecord, verifier: PinUserVerifier) throws(OperationError) {
    let slot = PIVSlot(rawValue: UInt8(record.slot))
    let source: ManagementKeySource
    do { source = try managementKey() } catch { throw .token(error) }
    // Durable intent before the overwrite: a kill between it and the local removal is finished at the next start
    // (the slot's public key read: another key there → the registration goes).
    let intent: Int64
    do { intent = try localData.beginIntent(.pivKeyOverwrite, tokenID: token.info.id, dependents: [record]) } catch {
      throw .localData(error)
    }
    do {
      try overwrite(slot, source: source, verifier: verifier)
    } catch {
      // Refused before the key was generated (PIN, management key, cancel): nothing changed on the card. Any other
      // failure leaves the intent for the next start, which reads the slot.
      switch error {
      case .token(.wrongPIN), .token(.pinBlocked), .token(.managementKeyRejected), .token(.cancelled), .cancelled,
        .declined, .blocked, .pinRefused, .timedOut:
        try? localData.clearIntent(intent)
      default: break
      }
      throw error
    }
    do { try localData.abandon(record.keyID) } catch { throw .localData(error) }
    try? localData.clearIntent(intent)
  }

  func overwrite(_ slot: PIVSlot, source: ManagementKeySource, verifier: PinUserVerifier) throws(OperationError) {
    let session = token.session
    if case .pinProtected = source {
      try PinVerification(purpose: "remove the key").run(on: token, verifier: verifier) { (pin) throws(TokenError) in
        try session.authenticateManagementKey(.pinProtected, pin: pin.bytes)
        _ = try session.generateKey(slot, algorithm: .eccP256)
      }
    } else {
      do {
        try session.transact { () throws(TokenError) in
          try session.authenticateManagementKey(.defaultKey)
          _ = try session.generateKey(slot, algorithm: .eccP256)
        }
      } catch { throw .token(error) }
    }
  }
}
