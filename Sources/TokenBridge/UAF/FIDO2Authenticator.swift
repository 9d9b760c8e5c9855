import SystemCrypto
import FoundationEssentials
import TokenDevices
import UAFCore

/// A FIDO2 key as a UAF authenticator. FIDO2 keys cannot sign arbitrary bytes, so the UAF P-256 key is derived:
/// per registration a credential with hmac-secret and a random salt; the key's hmac-secret output for that salt,
/// through HKDF-SHA-256, is the UAF private key. UAF signatures stay standard ECDSA; nothing secret is stored
/// (the salt and credential ID are not secret, the output exists only while signing).
public final class FIDO2Authenticator: TokenAuthenticator {
  public let key: DiscoveredFIDO2
  public let aaid: String
  let localData: LocalData
  let timeout: Double
  let resident: Bool
  /// The relying-party ID of TokenBridge's own FIDO2 credentials (never a website's).
  static let rpID = "tokenbridge.uaf"

  public var tokenInfo: TokenInfo { key.info }

  public init(key: DiscoveredFIDO2, configuration: Configuration, localData: LocalData) {
    self.key = key
    self.aaid = configuration.fido2AAID
    self.localData = localData
    self.timeout = configuration.interactionTimeout
    self.resident = configuration.fido2ResidentKeys
  }

  public func describe(keyIDs: [String] = []) -> AuthenticatorDescription {
    AuthenticatorProfile.description(
      .fido2, aaid: aaid, attestationTypes: [UAFConstant.attestationBasicSurrogate], keyIDs: keyIDs)
  }

  /// HKDF-SHA-256(IKM: hmac-secret output, salt: the registration's salt, info: label) → a P-256 scalar.
  static func derivedKey(_ output: [UInt8], salt: [UInt8]) -> P256.Signing.PrivateKey? {
    for counter in UInt8(0)..<4 {  // a derived value ≥ n is practically impossible; retry with a counter anyway
      let k = HKDF<SHA256>.deriveKey(
        inputKeyMaterial: SymmetricKey(data: output), salt: salt,
        info: Array("TokenBridge UAF P-256 key".utf8) + [counter], outputByteCount: 32)
      if let key = k.withUnsafeBytes({ try? P256.Signing.PrivateKey(rawRepresentation: $0) }) { return key }
    }
    return nil
  }

  /// Runs `body` with the PIN through the PIN-attempt engine (tries shown, value checked before sending, last
  /// try confirmed, a wrong PIN recoverable, a cool-down waited out with nothing sent), for keys with a PIN set.
  func withPIN<T>(
    purpose: String, transaction: String? = nil, verifier: PinUserVerifier,
    _ body: ([UInt8]) throws(TokenError) -> T
  ) throws(OperationError) -> T {
    try Self.withPIN(
      key: key, timeout: timeout, purpose: purpose, transaction: transaction, verifier: verifier, body)
  }

  /// `withPIN` for any FIDO2 key (credential management uses it too).
  static func withPIN<T>(
    key: DiscoveredFIDO2, timeout: Double, purpose: String, transaction: String? = nil, verifier: PinUserVerifier,
    _ body: ([UInt8]) throws(TokenError) -> T
  ) throws(OperationError) -> T {
    // getInfo when discovery read it (no request here): a PIN not set, or one the key wants changed, is said before
    // the PIN is asked. A command that did not read it (an assertion, `TokenDiscovery.fido2Info`) learns both from
    // the key's refusal of the PIN token (PIN_NOT_SET, PIN_POLICY_VIOLATION), which spends no try. The tries are
    // those discovery read a moment ago; afterwards the tries are read after each failure.
    if let info = key.session.infoIfRead {
      guard info.pinIsSet else { throw .token(.pinNotSet) }
      guard !info.forcePINChange else { throw .token(.pinChangeRequired) }  // lead the user into pin change
    }
    let engine = PinAttempts(
      token: key.info, kind: .pin, known: key.info.pin,
      readStatus: { () throws(TokenError) in try key.session.pinStatus() },
      waitForReinsertion: { () throws(OperationError) in
        guard let notifier = verifier as? ReinsertionNotifier else { throw .token(.needsReinsertion) }
        try PasswordChange(interactionTimeout: timeout).waitForReinsertion(key, notifier)
      }, coolingDown: { key.session.powerCycleRequired })
    func context(_ round: PinAttempts.Round) -> PinVerificationContext {
      PinVerificationContext(
        token: key.info, protection: round.protection, status: round.status, lastRecoverableError: round.lastError,
        transactionText: transaction, purpose: purpose)
    }
    return try engine.run(
      ask: { round in try verifier.providePin(context(round)) },
      check: { pin in TokenFormat.fido2PIN.validate(new: pin.bytes, old: nil).map { .invalidCurrent(.pin, $0) } },
      confirmLast: { round in try verifier.confirmLastAttempt(context(round)) },
      attempt: { (pin, _) throws(TokenError) -> T? in
        let normalized = Secret(PasswordPolicy.normalized(pin.bytes) ?? pin.bytes)  // wiped when released
        // The touches the body waits for are bounded by the interaction timeout (exit 14 past it).
        return try TouchDeadline.run(key.session.canceller, seconds: timeout) { () throws(TokenError) -> T in
          try body(normalized.bytes)
        }
      })
  }

  public func register(
    username: String, server: String, appID: String, finalChallengeHash: [UInt8], verifier: PinUserVerifier
  ) throws(OperationError) -> (assertion: [UInt8], keyID: String) {
    let keyIDBytes = (0..<32).map { _ in UInt8.random(in: 0...255) }
    let keyID = Base64URL.encode(keyIDBytes)
    let salt = (0..<32).map { _ in UInt8.random(in: 0...255) }
    let session = key.session
    // getInfo as the key answered it while opening (no request).
    let info: FIDO2Info
    do { info = try session.info() } catch { throw .token(error) }
    guard info.extensions.contains("hmac-secret") else {
      throw .token(.unsupported("hmac-secret (needed to derive the UAF key)"))
    }
    // The hmac-secret output is the UAF key's seed: kept in a `Secret`, wiped when released.
    let (credentialID, output) = try withPIN(
      purpose: "register \(username) (touch the key twice)", verifier: verifier
    ) { (pin) throws(TokenError) -> ([UInt8], Secret) in
      let cdh = Array(SHA256.hash(data: keyIDBytes))
      let id = try session.makeCredential(
        for: FIDO2CredentialOwner(
          rpID: Self.rpID, rpName: "TokenBridge", userID: keyIDBytes, userName: "tokenbridge",
          userDisplayName: "TokenBridge UAF"),
        clientDataHash: cdh, pin: pin, resident: resident)
      do throws(TokenError) {
        let out = try session.hmacSecret(rpID: Self.rpID, clientDataHash: cdh, credentialID: id, salt: salt, pin: pin)
        return (id, Secret(out))
      } catch {
        // A discoverable credential whose registration failed would stay on the key, listed as ours: it goes
        // (credential management, with the same PIN).
        if resident { try? session.deleteResidentCredential(id, pin: pin) }
        throw error
      }
    }
    guard let uafKey = Self.derivedKey(output.bytes, salt: salt) else {
      throw .token(.malformedResponse(operation: "hmac-secret"))
    }
    let point = Array(uafKey.publicKey.x963Representation)
    let record = AuthenticatorRecord(
      keyID: keyID, aaid: aaid, username: username, server: server, appID: appID, tokenID: key.info.id, slot: -1,
      publicKey: Data(point), signCounter: 0, state: .pending, createdAt: Date(), credentialID: Data(credentialID),
      hmacSalt: Data(salt))
    do { try localData.beginRegistration(record) } catch { throw .localData(error) }
    let krd = RegistrationAssertion.keyRegistrationData(
      aaid: aaid, info: AssertionInfo(authenticationMode: 1, publicKeyAlgAndEncoding: UAFAlgorithm.eccX962Raw),
      finalChallengeHash: finalChallengeHash, keyID: keyIDBytes, publicKey: point)
    guard let signature = try? uafKey.signature(for: krd).derRepresentation else {
      try? localData.abandon(keyID)
      throw .token(.malformedResponse(operation: "signature"))
    }
    return (RegistrationAssertion.assemble(krd: krd, signature: Array(signature)), keyID)
  }

  public func authenticate(
    record: AuthenticatorRecord, finalChallengeHash: [UInt8], transaction: (text: String, bytes: [UInt8])?,
    verifier: PinUserVerifier
  ) throws(OperationError) -> [UInt8] {
    guard let keyIDBytes = Base64URL.decode(record.keyID), let credentialID = record.credentialID,
      let salt = record.hmacSalt
    else { throw .localData(.notFound(record.keyID)) }
    let session = key.session
    let output = try withPIN(
      purpose: "sign in as \(record.username) (then touch the key)",
      transaction: transaction.map { TransactionContent.sanitized($0.text) }, verifier: verifier
    ) { (pin) throws(TokenError) -> Secret in
      Secret(
        try session.hmacSecret(
          rpID: Self.rpID, clientDataHash: Array(SHA256.hash(data: keyIDBytes)), credentialID: Array(credentialID),
          salt: Array(salt), pin: pin))
    }
    guard let uafKey = Self.derivedKey(output.bytes, salt: Array(salt)),
      Array(uafKey.publicKey.x963Representation) == Array(record.publicKey)
    else { throw .token(.unsupported("this registration (the key derives another public key: wrong key?)")) }
    let counter: UInt32
    do { counter = try localData.nextSignCounter(record.keyID) } catch { throw .localData(error) }
    let signedData = AuthenticationAssertion.signedData(
      aaid: aaid, info: AssertionInfo(authenticationMode: transaction == nil ? 1 : 2),
      nonce: (0..<8).map { _ in UInt8.random(in: 0...255) }, finalChallengeHash: finalChallengeHash,
      transactionContentHash: transaction.map { Array(SHA256.hash(data: $0.bytes)) } ?? [], keyID: keyIDBytes,
      signCounter: counter)
    guard let signature = try? uafKey.signature(for: signedData).derRepresentation else {
      throw .token(.malformedResponse(operation: "signature"))
    }
    return AuthenticationAssertion.assemble(signedData: signedData, signature: Array(signature))
  }

  /// The FIDO2 credential stays on the key (non-resident: it is only a handle); forgetting the salt and
  /// credential ID makes the UAF key underivable.
  public func destroyKey(_ record: AuthenticatorRecord, verifier: PinUserVerifier) throws(OperationError) {
    do { try localData.abandon(record.keyID) } catch { throw .localData(error) }
  }
}
