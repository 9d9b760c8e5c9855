/// Algorithm and encoding constants (FIDO Registry of Predefined Values §3.6.1, §3.6.2).
public enum UAFAlgorithm {
  public static let secp256r1ECDSASHA256Raw: UInt16 = 0x0001
  public static let secp256r1ECDSASHA256DER: UInt16 = 0x0002
  public static let eccX962Raw: UInt16 = 0x0100
  public static let eccX962DER: UInt16 = 0x0101
}

/// The fixed part of ASSERTION_INFO.
public struct AssertionInfo: Equatable, Sendable {
  public var authenticatorVersion: UInt16
  /// 0x01 user verified; 0x02 user verified and transaction content shown (authentication only).
  public var authenticationMode: UInt8
  public var signatureAlgAndEncoding: UInt16
  /// Registration only.
  public var publicKeyAlgAndEncoding: UInt16?

  public init(
    authenticatorVersion: UInt16 = 1, authenticationMode: UInt8 = 1,
    signatureAlgAndEncoding: UInt16 = UAFAlgorithm.secp256r1ECDSASHA256DER, publicKeyAlgAndEncoding: UInt16? = nil
  ) {
    self.authenticatorVersion = authenticatorVersion
    self.authenticationMode = authenticationMode
    self.signatureAlgAndEncoding = signatureAlgAndEncoding
    self.publicKeyAlgAndEncoding = publicKeyAlgAndEncoding
  }

  var bytes: [UInt8] {
    authenticatorVersion.littleEndianBytes + [authenticationMode] + signatureAlgAndEncoding.littleEndianBytes
      + (publicKeyAlgAndEncoding?.littleEndianBytes ?? [])
  }

  init(_ b: [UInt8], registration: Bool) throws(TLVError) {
    guard b.count == (registration ? 7 : 5) else {
      throw .invalid(tag: UAFTag.assertionInfo, reason: "\(b.count) bytes, expected \(registration ? 7 : 5)")
    }
    authenticatorVersion = UInt16(b[0]) | UInt16(b[1]) << 8
    authenticationMode = b[2]
    signatureAlgAndEncoding = UInt16(b[3]) | UInt16(b[4]) << 8
    publicKeyAlgAndEncoding = registration ? UInt16(b[5]) | UInt16(b[6]) << 8 : nil
  }
}

/// Checks the AAID form `VVVV#MMMM` (ASCII hex digits, case-insensitive; UAF Protocol §3.1.4).
/// `Character.isHexDigit` is not used: it also accepts the fullwidth forms (`Ｆ`).
public func isValidAAID(_ s: String) -> Bool {
  let b = Array(s.utf8)
  return b.count == 9 && b[4] == UInt8(ascii: "#") && (b[0..<4] + b[5..<9]).allSatisfy(isASCIIHexDigit)
}

func isASCIIHexDigit(_ c: UInt8) -> Bool {
  switch c {
  case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"),
    UInt8(ascii: "A")...UInt8(ascii: "F"):
    true
  default: false
  }
}

/// UAFV1_REG_ASSERTION (UAF Authenticator Commands §6.1.2): KRD plus surrogate or full basic attestation.
public struct RegistrationAssertion: Equatable, Sendable {
  public var aaid: String
  public var info: AssertionInfo
  public var finalChallengeHash: [UInt8]
  public var keyID: [UInt8]
  public var signCounter: UInt32
  public var registrationCounter: UInt32
  public var publicKey: [UInt8]
  /// The KRD's bytes, header included: what the attestation signature covers.
  public var signedBytes: [UInt8]
  public var signature: [UInt8]
  /// Empty for surrogate attestation.
  public var attestationCertificates: [[UInt8]]

  /// The KRD to sign (header included).
  public static func keyRegistrationData(
    aaid: String, info: AssertionInfo, finalChallengeHash: [UInt8], keyID: [UInt8], signCounter: UInt32 = 0,
    registrationCounter: UInt32 = 0, publicKey: [UInt8]
  ) -> [UInt8] {
    UAFTLV.encode(
      UAFTag.krd,
      children: [
        UAFTLV.encode(UAFTag.aaid, Array(aaid.utf8)), UAFTLV.encode(UAFTag.assertionInfo, info.bytes),
        UAFTLV.encode(UAFTag.finalChallengeHash, finalChallengeHash), UAFTLV.encode(UAFTag.keyID, keyID),
        UAFTLV.encode(UAFTag.counters, signCounter.littleEndianBytes + registrationCounter.littleEndianBytes),
        UAFTLV.encode(UAFTag.publicKey, publicKey),
      ])
  }

  /// The whole assertion: KRD ‖ ATTESTATION_BASIC_SURROGATE{SIGNATURE} (or FULL with certificates).
  public static func assemble(krd: [UInt8], signature: [UInt8], certificates: [[UInt8]] = []) -> [UInt8] {
    let attestation =
      certificates.isEmpty
      ? UAFTLV.encode(UAFTag.attestationBasicSurrogate, UAFTLV.encode(UAFTag.signature, signature))
      : UAFTLV.encode(
        UAFTag.attestationBasicFull,
        children: [UAFTLV.encode(UAFTag.signature, signature)]
          + certificates.map {
            UAFTLV.encode(UAFTag.attestationCert, $0)
          })
    return UAFTLV.encode(UAFTag.regAssertion, krd + attestation)
  }

  public init(parsing bytes: [UInt8]) throws(TLVError) {
    let root = try UAFTLV.parseSingle(bytes, expecting: UAFTag.regAssertion)
    let krd = try root.require(UAFTag.krd)
    aaid = String(decoding: try krd.require(UAFTag.aaid).value, as: UTF8.self)
    guard isValidAAID(aaid) else { throw .invalid(tag: UAFTag.aaid, reason: "not VVVV#MMMM") }
    info = try AssertionInfo(try krd.require(UAFTag.assertionInfo).value, registration: true)
    finalChallengeHash = try krd.require(UAFTag.finalChallengeHash).value
    keyID = try krd.require(UAFTag.keyID).value
    guard !keyID.isEmpty else { throw .invalid(tag: UAFTag.keyID, reason: "empty") }
    let counters = try krd.require(UAFTag.counters).value
    guard counters.count == 8 else {
      throw .invalid(tag: UAFTag.counters, reason: "\(counters.count) bytes, expected 8")
    }
    signCounter = UInt32(littleEndianBytes: Array(counters[0..<4]))!
    registrationCounter = UInt32(littleEndianBytes: Array(counters[4..<8]))!
    publicKey = try krd.require(UAFTag.publicKey).value
    signedBytes = krd.encoded
    if let surrogate = root.child(UAFTag.attestationBasicSurrogate) {
      signature = try surrogate.require(UAFTag.signature).value
      attestationCertificates = []
    } else if let full = root.child(UAFTag.attestationBasicFull) {
      signature = try full.require(UAFTag.signature).value
      attestationCertificates = full.children.filter { $0.tag == UAFTag.attestationCert }.map(\.value)
      guard !attestationCertificates.isEmpty else { throw .missing(tag: UAFTag.attestationCert, in: full.tag) }
    } else {
      throw .missing(tag: UAFTag.attestationBasicSurrogate, in: root.tag)
    }
  }
}

/// UAFV1_AUTH_ASSERTION (UAF Authenticator Commands §6.2.2): SIGNED_DATA plus SIGNATURE.
public struct AuthenticationAssertion: Equatable, Sendable {
  public var aaid: String
  public var info: AssertionInfo
  public var nonce: [UInt8]
  public var finalChallengeHash: [UInt8]
  /// Empty when there was no transaction.
  public var transactionContentHash: [UInt8]
  public var keyID: [UInt8]
  public var signCounter: UInt32
  public var signedBytes: [UInt8]
  public var signature: [UInt8]

  /// SIGNED_DATA to sign (header included).
  public static func signedData(
    aaid: String, info: AssertionInfo, nonce: [UInt8], finalChallengeHash: [UInt8], transactionContentHash: [UInt8],
    keyID: [UInt8], signCounter: UInt32
  ) -> [UInt8] {
    UAFTLV.encode(
      UAFTag.signedData,
      children: [
        UAFTLV.encode(UAFTag.aaid, Array(aaid.utf8)), UAFTLV.encode(UAFTag.assertionInfo, info.bytes),
        UAFTLV.encode(UAFTag.authenticatorNonce, nonce), UAFTLV.encode(UAFTag.finalChallengeHash, finalChallengeHash),
        UAFTLV.encode(UAFTag.transactionContentHash, transactionContentHash), UAFTLV.encode(UAFTag.keyID, keyID),
        UAFTLV.encode(UAFTag.counters, signCounter.littleEndianBytes),
      ])
  }

  public static func assemble(signedData: [UInt8], signature: [UInt8]) -> [UInt8] {
    UAFTLV.encode(UAFTag.authAssertion, signedData + UAFTLV.encode(UAFTag.signature, signature))
  }

  public init(parsing bytes: [UInt8]) throws(TLVError) {
    let root = try UAFTLV.parseSingle(bytes, expecting: UAFTag.authAssertion)
    let sd = try root.require(UAFTag.signedData)
    aaid = String(decoding: try sd.require(UAFTag.aaid).value, as: UTF8.self)
    guard isValidAAID(aaid) else { throw .invalid(tag: UAFTag.aaid, reason: "not VVVV#MMMM") }
    info = try AssertionInfo(try sd.require(UAFTag.assertionInfo).value, registration: false)
    nonce = try sd.require(UAFTag.authenticatorNonce).value
    guard nonce.count >= 8 else { throw .invalid(tag: UAFTag.authenticatorNonce, reason: "shorter than 8 bytes") }
    finalChallengeHash = try sd.require(UAFTag.finalChallengeHash).value
    transactionContentHash = try sd.require(UAFTag.transactionContentHash).value
    keyID = try sd.require(UAFTag.keyID).value
    let counters = try sd.require(UAFTag.counters).value
    guard let c = UInt32(littleEndianBytes: counters) else {
      throw .invalid(tag: UAFTag.counters, reason: "\(counters.count) bytes, expected 4")
    }
    signCounter = c
    signedBytes = sd.encoded
    signature = try root.require(UAFTag.signature).value
  }
}
