import FoundationEssentials
import TokenDevices
import UAFCore

/// What the metadata statement of one kind of token says, in numbers: `AuthenticatorProfile`'s facts (the ones
/// Discover answers and registrations carry) plus what only a statement states (how the PIN is verified, the
/// attestation trust anchors). `uaf11` writes them as they are; `v3()` through `MetadataRegistry`'s strings.
public struct AuthenticatorMetadata: Equatable, Sendable {
  public var kind: TokenKind
  /// The profile's description of the kind under the configuration: AAID, versions, algorithm, attestation…
  public var facts: AuthenticatorDescription
  public var upv: [Version]
  public var publicKeyAlgAndEncoding: UInt16
  public var icon: String
  public var userVerificationDetails: [[MetadataStatementUAF11.VerificationMethod]]
  /// DER certificates; empty unless the attestation is basic full.
  public var attestationRootCertificates: [[UInt8]]
  /// ECDSA on P-256 (ALG_SIGN_SECP256R1_ECDSA_SHA256_*): 128 bits of security (NIST SP 800-57 Pt 1 §5.6.1).
  public var cryptoStrength: UInt16 = 128
  /// The UAF keys sign UAF assertions only: a PIV slot key TokenBridge generated for one registration, a FIDO2
  /// key's derived key that exists only while a UAF assertion is signed.
  public var isKeyRestricted = true
  /// Every signature asks for the PIN again (TokenBridge keeps no PIN and no verified session between operations).
  public var isFreshUserVerificationRequired = true

  /// The metadata of `kind` under `configuration`; `attestationRoots` (DER) go into the statement when the
  /// kind's registrations carry basic full attestation.
  public init(_ kind: TokenKind, configuration: Configuration, attestationRoots: [[UInt8]] = []) {
    self.kind = kind
    facts = AuthenticatorProfile.description(kind, configuration: configuration)
    upv = AuthenticatorProfile.supportedUAFVersions
    publicKeyAlgAndEncoding = AuthenticatorProfile.publicKeyAlgAndEncoding
    icon = AuthenticatorProfile.icon
    userVerificationDetails = Self.verificationDetails(kind, userVerification: facts.userVerification)
    attestationRootCertificates =
      facts.attestationTypes.contains(UAFConstant.attestationBasicFull) ? attestationRoots : []
  }

  /// How the PIN of `kind` is verified: the code a metadata statement describes (caDesc).
  /// - PIV: digits only, 6 to 8 (`PinPolicy.pivPIN`: SP 800-73-4 Part 2 §2.4.3; the device layer pads to that
  ///   length, digits are what the PIV spec names and what `pin change` accepts): base 10, minLength 6.
  ///   maxRetries 3: SP 800-73-4 leaves the retry counter to the card issuer; 3 is the YubiKey PIV factory default
  ///   (Yubico's PIV documentation, `yubico-piv-tool -a verify-pin`) and the virtual card's, the cards this project
  ///   tests. An operator who sets another count (`ykman piv access set-retries`) edits the statement.
  ///   blockSlowdown 0: a blocked PIN stays blocked until the PUK resets it (§3.2.3 RESET RETRY COUNTER).
  /// - FIDO2: a clientPIN is a password of at least 4 Unicode code points (CTAP 2.1 §6.5.1, `PasswordPolicy`);
  ///   base 64 as FIDO2 statements write an alphanumeric PIN (the registry has no radix for "any character").
  ///   maxRetries 8: CTAP 2.1 §6.5 (the PIN retries counter starts at 8; 3 wrong in a row want a power cycle,
  ///   which is not a wait in seconds). blockSlowdown 0: blocked until the key is reset.
  public static func passcode(_ kind: TokenKind) -> CodeAccuracyDescriptor {
    switch kind {
    case .piv:
      CodeAccuracyDescriptor(
        base: 10, minLength: UInt16(PinPolicy.pivPIN.minLength), maxRetries: 3, blockSlowdown: 0)
    case .fido2:
      CodeAccuracyDescriptor(
        base: 64, minLength: UInt16(PasswordPolicy(minPINLength: 0).minCodePoints), maxRetries: 8,
        blockSlowdown: 0)
    }
  }

  /// userVerificationDetails from the USER_VERIFY bits Discover gives (Metadata Statement v1.1 §3.5, UAF Protocol
  /// §3.1.11 read backwards): with USER_VERIFY_ALL, one combination of every method (AND); else each method an
  /// alternative (OR). Methods in the order the user meets them: the PIN first, then the rest by value.
  static func verificationDetails(_ kind: TokenKind, userVerification bits: UInt32)
    -> [[MetadataStatementUAF11.VerificationMethod]]
  {
    let pin = UAFConstant.userVerifyPasscode
    let methods = MetadataRegistry.userVerification.map(\.value)
      .filter { $0 != UAFConstant.userVerifyAll && bits & $0 != 0 }
      .sorted { ($0 == pin ? 0 : $0) < ($1 == pin ? 0 : $1) }
    let descriptors = methods.map {
      MetadataStatementUAF11.VerificationMethod(userVerification: $0, caDesc: $0 == pin ? passcode(kind) : nil)
    }
    return bits & UAFConstant.userVerifyAll != 0 ? [descriptors] : descriptors.map { [$0] }
  }

  /// The attestation roots in the form statements write them: standard base64 (RFC 4648 §4, with padding) of DER.
  var attestationRootsBase64: [String] { attestationRootCertificates.map { Data($0).base64EncodedString() } }

  /// The statement in the UAF 1.1 numeric form.
  public var uaf11: MetadataStatementUAF11 {
    MetadataStatementUAF11(
      aaid: facts.aaid, description: facts.description, authenticatorVersion: facts.authenticatorVersion,
      protocolFamily: "uaf", upv: upv, assertionScheme: facts.assertionScheme,
      authenticationAlgorithm: facts.authenticationAlgorithm, publicKeyAlgAndEncoding: publicKeyAlgAndEncoding,
      attestationTypes: facts.attestationTypes, userVerificationDetails: userVerificationDetails,
      keyProtection: facts.keyProtection, isKeyRestricted: isKeyRestricted,
      isFreshUserVerificationRequired: isFreshUserVerificationRequired, matcherProtection: facts.matcherProtection,
      attachmentHint: facts.attachmentHint, isSecondFactorOnly: facts.isSecondFactorOnly, tcDisplay: facts.tcDisplay,
      tcDisplayContentType: facts.tcDisplay == 0 ? nil : facts.tcDisplayContentType,
      attestationRootCertificates: attestationRootsBase64, icon: icon)
  }

  /// The statement in the v3.0 string form; `MetadataError.unmappable` when a value has no registry string.
  public func v3() throws(MetadataError) -> MetadataStatement {
    typealias R = MetadataRegistry
    func one(_ field: String, _ value: some BinaryInteger, _ table: R.Table) throws(MetadataError) -> String {
      guard let s = R.name(value, in: table) else { throw .unmappable(field: field, value: UInt32(value)) }
      return s
    }
    func bits(_ field: String, _ value: some BinaryInteger, _ table: R.Table) throws(MetadataError) -> [String] {
      guard let s = R.names(value, in: table) else { throw .unmappable(field: field, value: UInt32(value)) }
      return s
    }
    var details: [[MetadataStatement.VerificationMethod]] = []
    for combination in userVerificationDetails {
      var methods: [MetadataStatement.VerificationMethod] = []
      for m in combination {
        methods.append(
          .init(
            userVerificationMethod: try one("userVerification", m.userVerification, R.userVerification),
            caDesc: m.caDesc))
      }
      details.append(methods)
    }
    var attestation: [String] = []
    for t in facts.attestationTypes { attestation.append(try one("attestationTypes", t, R.attestationType)) }
    return MetadataStatement(
      legalHeader: MetadataStatement.legalHeader, aaid: facts.aaid, description: facts.description,
      authenticatorVersion: UInt32(facts.authenticatorVersion), protocolFamily: "uaf", schema: 3, upv: upv,
      authenticationAlgorithms: [
        try one("authenticationAlgorithm", facts.authenticationAlgorithm, R.authenticationAlgorithm)
      ],
      publicKeyAlgAndEncodings: [
        try one("publicKeyAlgAndEncoding", publicKeyAlgAndEncoding, R.publicKeyAlgAndEncoding)
      ],
      attestationTypes: attestation, userVerificationDetails: details,
      keyProtection: try bits("keyProtection", facts.keyProtection, R.keyProtection),
      isKeyRestricted: isKeyRestricted, isFreshUserVerificationRequired: isFreshUserVerificationRequired,
      matcherProtection: try bits("matcherProtection", facts.matcherProtection, R.matcherProtection),
      cryptoStrength: cryptoStrength,
      attachmentHint: try bits("attachmentHint", facts.attachmentHint, R.attachmentHint),
      tcDisplay: try bits("tcDisplay", facts.tcDisplay, R.tcDisplay),
      tcDisplayContentType: facts.tcDisplay == 0 ? nil : facts.tcDisplayContentType,
      attestationRootCertificates: attestationRootsBase64, icon: icon)
  }

  /// The statement in `schema`'s form.
  public func statement(_ schema: MetadataSchema) throws(MetadataError) -> AnyMetadataStatement {
    switch schema {
    case .v3: .v3(try v3())
    case .uaf11: .uaf11(uaf11)
    }
  }
}
