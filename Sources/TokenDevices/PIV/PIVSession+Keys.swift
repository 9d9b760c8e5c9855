import Platform

/// Management-key authentication (SP 800-73-4 Part 2 §3.2.4 GENERAL AUTHENTICATE, Appendix A.1),
/// GENERATE ASYMMETRIC KEY PAIR (§3.3.2), signing (§3.2.4) and Yubico GET METADATA.
extension PIVSession {
  /// The 9B cipher: GET METADATA tag 01 where the card answers it, else 3DES (SP 800-78-4 Table 6-1's
  /// original 9B algorithm, and what yubico-piv-tool assumes without metadata).
  public func managementKeyAlgorithm() throws(TokenError) -> ManagementKeyAlgorithm {
    guard quirks.mayHaveMetadata else { return .tripleDES }
    return try transact { () throws(TokenError) -> ManagementKeyAlgorithm in
      let r = try send(APDU(ins: 0xF7, p2: 0x9B, le: 0))
      answers.metadata = CardAnswers.support(after: r.statusWord, was: answers.metadata)
      guard r.statusWord == .success, let alg = BERTLV.find(0x01, in: r.data)?.first else { return .tripleDES }
      return ManagementKeyAlgorithm(rawValue: alg) ?? .tripleDES
    }
  }

  /// Mutual authentication with the management key. For `.pinProtected` the PIN is verified first and the
  /// key read from 5FC109 (yubikey-manager's convention); `pin` is needed only then.
  public func authenticateManagementKey(_ source: ManagementKeySource, pin: [UInt8]? = nil) throws(TokenError) {
    try transact { () throws(TokenError) in
      let algorithm = try managementKeyAlgorithm()
      var key: [UInt8]
      switch source {
      case .defaultKey: key = ManagementKeySource.defaultKeyBytes
      case .key(let k): key = k
      case .pinProtected:
        guard let pin else { throw .pinFormat(.pin, .tooShort(minimum: Self.referenceDataLength.lowerBound)) }
        key = try pinProtectedManagementKey(pin: pin)
      }
      defer { wipe(&key) }
      guard key.count == algorithm.keyLength else {
        throw .unsupported(
          "a \(algorithm) management key of \(algorithm.keyLength) bytes (got \(key.count) bytes)")
      }
      try mutualAuthenticate(key: key, algorithm: algorithm)
    }
  }

  /// True when admin data (5FFF00) says the management key is stored PIN-protected (flag 0x02).
  public func hasPINProtectedManagementKey() throws(TokenError) -> Bool {
    guard let admin = try readObject(0x5FFF00), let inner = BERTLV.find(0x80, in: admin),
      let flags = BERTLV.find(0x81, in: inner)?.first
    else { return false }
    return flags & 0x02 != 0
  }

  func pinProtectedManagementKey(pin: [UInt8]) throws(TokenError) -> [UInt8] {
    try verifyPIN(pin)
    guard let printed = try readObject(0x5FC109, sensitive: true), let inner = BERTLV.find(0x88, in: printed),
      let key = BERTLV.find(0x89, in: inner)
    else { throw .unsupported("a PIN-protected management key (none stored on this card)") }
    return key
  }

  func mutualAuthenticate(key: [UInt8], algorithm: ManagementKeyAlgorithm) throws(TokenError) {
    try ManagementKeyCipher.loadLibrary()
    let n = algorithm.blockSize
    let alg = algorithm.rawValue
    card.transport.resetOnClose = true
    let r1 = try send(APDU(ins: 0x87, p1: alg, p2: 0x9B, data: [0x7C, 0x02, 0x80, 0x00], le: 0, sensitive: true))
    try expectSuccess(r1, "GENERAL AUTHENTICATE (witness)")
    guard let t1 = BERTLV.find(0x7C, in: r1.data), let encWitness = BERTLV.find(0x80, in: t1),
      encWitness.count == n,
      let witness = ManagementKeyCipher.crypt(encWitness, key: key, algorithm: algorithm, encrypt: false)
    else { throw .malformedResponse(operation: "GENERAL AUTHENTICATE (witness)") }
    let challenge = ManagementKeyCipher.random(n)
    let body = BERTLV.encode(0x80, witness) + BERTLV.encode(0x81, challenge)
    let r2 = try send(APDU(ins: 0x87, p1: alg, p2: 0x9B, data: BERTLV.encode(0x7C, body), le: 0, sensitive: true))
    if r2.statusWord == .securityStatusNotSatisfied || r2.statusWord == .incorrectData {
      throw .managementKeyRejected
    }
    try expectSuccess(r2, "GENERAL AUTHENTICATE (challenge)")
    guard let t2 = BERTLV.find(0x7C, in: r2.data), let response = BERTLV.find(0x82, in: t2),
      let expected = ManagementKeyCipher.crypt(challenge, key: key, algorithm: algorithm, encrypt: true)
    else { throw .malformedResponse(operation: "GENERAL AUTHENTICATE (challenge)") }
    // The card proved it knows the key too; a mismatch means a card we should not talk to.
    guard response == expected else { throw .managementKeyRejected }
  }

  /// Yubico GET METADATA for a key slot; `nil` when the slot is empty: any of `CardAnswers.emptySlot`, or 9000
  /// without an algorithm (tag 01). Throws `.unsupported` when the card does not implement GET METADATA
  /// (6D00 and the like, remembered for the session): callers fall back to standard PIV.
  public func metadata(_ slot: PIVSlot) throws(TokenError) -> PIVSlotMetadata? {
    guard quirks.mayHaveMetadata else { throw .unsupported(Self.noMetadata) }
    return try transact { () throws(TokenError) -> PIVSlotMetadata? in
      let r = try send(APDU(ins: 0xF7, p2: slot.rawValue, le: 0))
      answers.metadata = CardAnswers.support(after: r.statusWord, was: answers.metadata)
      if quirks.contains(.noMetadata) { throw .unsupported(Self.noMetadata) }
      if CardAnswers.emptySlot.contains(r.statusWord) {
        answers.emptySlotWord = r.statusWord
        return nil
      }
      try expectSuccess(r, "GET METADATA")
      guard let tlvs = BERTLV.parse(r.data) else { throw .malformedResponse(operation: "GET METADATA") }
      guard let alg = tlvs.first(where: { $0.tag == 0x01 })?.value.first else {
        answers.emptyMetadataWithoutAlgorithm = true  // an empty slot, said with 9000
        return nil
      }
      let policy = tlvs.first { $0.tag == 0x02 }?.value
      let origin = tlvs.first { $0.tag == 0x03 }?.value.first
      let pub = tlvs.first { $0.tag == 0x04 }?.value
      return PIVSlotMetadata(
        algorithm: alg, pinPolicy: policy?.first, touchPolicy: policy?.dropFirst().first,
        generatedOnCard: origin.map { $0 == 1 }, publicKey: pub.flatMap { BERTLV.find(0x86, in: $0) })
    }
  }

  /// What `.unsupported` names when a card has no GET METADATA.
  public static let noMetadata = "GET METADATA (a YubiKey extension of PIV)"

  /// Whether a slot holds a key: GET METADATA where the card answers it; without it (or when it says empty)
  /// whether the slot's certificate object exists. A key without a certificate on a card without GET
  /// METADATA cannot be seen by standard PIV at all (SP 800-73-4 has no command that tells it): such a slot
  /// reads as empty (HardwareNotes.md).
  public func slotIsOccupied(_ slot: PIVSlot) throws(TokenError) -> Bool {
    try transact { () throws(TokenError) -> Bool in
      if quirks.mayHaveMetadata {
        do throws(TokenError) {
          if try metadata(slot) != nil { return true }
        } catch {
          guard case .unsupported = error else { throw error }
        }
      }
      return try readObject(slot.certificateObject) != nil
    }
  }

  /// Where a slot's public key comes from.
  public enum PublicKeySource: Sendable, Equatable {
    /// GET METADATA tag 04 (YubiKey extension).
    case metadata
    /// The slot's certificate object (SP 800-73-4 Part 1 Table 3; the SubjectPublicKeyInfo of its X.509).
    case certificate
  }

  /// The public key in `slot` as an uncompressed EC point: GET METADATA where the card answers it, else the
  /// SubjectPublicKeyInfo of the slot's certificate. `nil` when neither tells (empty slot, or a key without
  /// a certificate on a card without GET METADATA: `slotEmptyIsKnown` says which).
  public func publicKey(_ slot: PIVSlot) throws(TokenError) -> (
    key: [UInt8]?, source: PublicKeySource?, slotEmptyIsKnown: Bool
  ) {
    try transact { () throws(TokenError) in
      var metadataSaysEmpty = false
      if quirks.mayHaveMetadata {
        do throws(TokenError) {
          if let m = try metadata(slot) {
            if let k = m.publicKey { return (k, .metadata, false) }
          } else {
            metadataSaysEmpty = true
          }
        } catch {
          guard case .unsupported = error else { throw error }
        }
      }
      if let obj = try readObject(slot.certificateObject), let der = BERTLV.find(0x70, in: obj),
        let point = X509PublicKey.ecPoint(certificate: der)
      {
        return (point, .certificate, false)
      }
      return (nil, nil, metadataSaysEmpty)
    }
  }

  /// Generates a key pair in `slot` (management key must be authenticated in the same transaction).
  /// Returns the uncompressed EC point `04‖X‖Y`.
  public func generateKey(_ slot: PIVSlot, algorithm: PIVKeyAlgorithm = .eccP256) throws(TokenError) -> [UInt8] {
    guard algorithm == .eccP256 || algorithm == .eccP384 else { throw .unsupported("RSA key generation") }
    let r = try transact { () throws(TokenError) in
      try send(APDU(ins: 0x47, p2: slot.rawValue, data: BERTLV.encode(0xAC, [0x80, 0x01, algorithm.rawValue]), le: 0))
    }
    try expectSuccess(r, "GENERATE ASYMMETRIC KEY PAIR")
    guard let t = BERTLV.find(0x7F49, in: r.data), let point = BERTLV.find(0x86, in: t), point.first == 0x04 else {
      throw .malformedResponse(operation: "GENERATE ASYMMETRIC KEY PAIR")
    }
    return point
  }

  /// Signs a SHA-256 (32-byte) digest with the P-256 key in `slot`. Returns DER ECDSA-Sig-Value.
  /// The PIN must be verified in the same transaction for slots whose policy asks for it.
  public func sign(_ slot: PIVSlot, digest: [UInt8], algorithm: PIVKeyAlgorithm = .eccP256) throws(TokenError)
    -> [UInt8]
  {
    let size = algorithm == .eccP384 ? 48 : 32
    guard digest.count == size else { throw .unsupported("a digest of \(digest.count) bytes for this key") }
    let body = BERTLV.encode(0x7C, [0x82, 0x00] + BERTLV.encode(0x81, digest))
    let r = try transact { () throws(TokenError) in
      try send(APDU(ins: 0x87, p1: algorithm.rawValue, p2: slot.rawValue, data: body, le: 0))
    }
    // An empty slot: YubiKeys say 6A80; other cards 6A82, 6A86 or 6A88 (HardwareNotes.md).
    if CardAnswers.emptySlot.contains(r.statusWord) {
      answers.emptySlotWord = r.statusWord
      throw .slotEmpty(slot.rawValue)
    }
    // CanoKey's PIV answers GENERAL AUTHENTICATE on an empty slot 6985 (conditions of use not satisfied), before
    // any check of the PIN (canokey-core applets/piv/piv.c, `piv_general_authenticate`). A slot with a key answers
    // 6982 while the PIN is not verified, so 6985 here says the key is missing. GENERAL AUTHENTICATE only: GET
    // METADATA and GET DATA keep their own words.
    if r.statusWord == .conditionsNotSatisfied { throw .slotEmpty(slot.rawValue) }
    try expectSuccess(r, "GENERAL AUTHENTICATE (sign)")
    guard let t = BERTLV.find(0x7C, in: r.data), let sig = BERTLV.find(0x82, in: t), sig.first == 0x30 else {
      throw .malformedResponse(operation: "GENERAL AUTHENTICATE (sign)")
    }
    return sig
  }
}
