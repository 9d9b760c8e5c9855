import UAFCore

/// The two forms a metadata statement is written in.
public enum MetadataSchema: String, CaseIterable, Sendable {
  /// FIDO Metadata Statement v3.0 (`schema: 3`): registry values as strings, algorithms and encodings as lists.
  case v3 = "3"
  /// The UAF 1.1-era form (FIDO Metadata Statements v1.1 §4): registry values as numbers and bit fields, one
  /// algorithm and one encoding, `assertionScheme` and `isSecondFactorOnly`; what UAF 1.1 servers read.
  case uaf11 = "1.1"
}

/// CodeAccuracyDescriptor (Metadata Statement v1.1 §3.1, the same in v3.0): what a passcode is.
public struct CodeAccuracyDescriptor: Codable, Equatable, Sendable {
  /// The radix of the code: 10 for decimal digits.
  public var base: UInt16
  /// The fewest digits (of `base`) a code has.
  public var minLength: UInt16
  /// Wrong attempts before the method blocks (0: never blocks).
  public var maxRetries: UInt16?
  /// Seconds to wait after blocking; 0: blocked until an alternative method (here: the PUK, or a reset) succeeds.
  public var blockSlowdown: UInt16?

  public init(base: UInt16, minLength: UInt16, maxRetries: UInt16?, blockSlowdown: UInt16?) {
    self.base = base
    self.minLength = minLength
    self.maxRetries = maxRetries
    self.blockSlowdown = blockSlowdown
  }
}

/// A FIDO Metadata Statement v3.0 of a UAF authenticator (MDS v3.0 §4, "Metadata Keys"). Keys this client's
/// authenticators never need (aaguid, attestationCertificateKeyIdentifiers, ecdaaTrustAnchors,
/// tcDisplayPNGCharacteristics, authenticatorGetInfo, supportedExtensions, alternativeDescriptions) are left out.
public struct MetadataStatement: Codable, Equatable, Sendable {
  /// VerificationMethodDescriptor (v3.0): a user verification method by its registry string.
  public struct VerificationMethod: Codable, Equatable, Sendable {
    public var userVerificationMethod: String
    public var caDesc: CodeAccuracyDescriptor?
  }

  public var legalHeader: String
  public var aaid: String
  /// English, ASCII, at most 200 characters.
  public var description: String
  /// The earliest trustworthy authenticatorVersion (ASSERTION_INFO's).
  public var authenticatorVersion: UInt32
  public var protocolFamily: String
  public var schema: UInt16
  public var upv: [Version]
  public var authenticationAlgorithms: [String]
  public var publicKeyAlgAndEncodings: [String]
  public var attestationTypes: [String]
  /// Alternatives (OR) of combinations (AND).
  public var userVerificationDetails: [[VerificationMethod]]
  public var keyProtection: [String]
  public var isKeyRestricted: Bool
  public var isFreshUserVerificationRequired: Bool
  public var matcherProtection: [String]
  /// Bits of security of the key (P-256: 128).
  public var cryptoStrength: UInt16
  public var attachmentHint: [String]
  /// Empty when the authenticator confirms no transaction.
  public var tcDisplay: [String]
  public var tcDisplayContentType: String?
  /// Trust anchors of the attestation, DER in standard base64 (RFC 4648 §4); empty for surrogate attestation.
  public var attestationRootCertificates: [String]
  /// A `data:` URL of a PNG (RFC 2397).
  public var icon: String

  /// The legal header every statement carries (MDS v3.0 §4).
  public static let legalHeader = "https://fidoalliance.org/metadata/metadata-statement-legal-header/"
}

/// A metadata statement in the UAF 1.1-era numeric form (FIDO Metadata Statements v1.1 RD 2016-07-09 §4,
/// `dictionary MetadataStatement`): only the keys that dictionary has (no cryptoStrength, no schema, no legal
/// header). Its shared keys have the names and values of the Client API's `Authenticator` dictionary that
/// `DiscoveredAuthenticator` encodes (aaid, description, assertionScheme, authenticationAlgorithm, attestationTypes,
/// keyProtection, matcherProtection, attachmentHint, isSecondFactorOnly, tcDisplay, tcDisplayContentType, icon).
public struct MetadataStatementUAF11: Codable, Equatable, Sendable {
  /// VerificationMethodDescriptor (v1.1 §3.4): one USER_VERIFY constant, never a combination of bits.
  public struct VerificationMethod: Codable, Equatable, Sendable {
    public var userVerification: UInt32
    public var caDesc: CodeAccuracyDescriptor?
  }

  public var aaid: String
  public var description: String
  public var authenticatorVersion: UInt16
  public var protocolFamily: String
  public var upv: [Version]
  public var assertionScheme: String
  public var authenticationAlgorithm: UInt16
  public var publicKeyAlgAndEncoding: UInt16
  public var attestationTypes: [UInt16]
  public var userVerificationDetails: [[VerificationMethod]]
  public var keyProtection: UInt16
  public var isKeyRestricted: Bool
  public var isFreshUserVerificationRequired: Bool
  public var matcherProtection: UInt16
  public var attachmentHint: UInt32
  public var isSecondFactorOnly: Bool
  public var tcDisplay: UInt16
  public var tcDisplayContentType: String?
  public var attestationRootCertificates: [String]
  public var icon: String
}

/// A statement in either form, encoded as the form's own JSON object.
public enum AnyMetadataStatement: Encodable, Equatable, Sendable {
  case v3(MetadataStatement)
  case uaf11(MetadataStatementUAF11)

  public var aaid: String {
    switch self {
    case .v3(let s): s.aaid
    case .uaf11(let s): s.aaid
    }
  }

  public func encode(to encoder: any Encoder) throws {
    switch self {
    case .v3(let s): try s.encode(to: encoder)
    case .uaf11(let s): try s.encode(to: encoder)
    }
  }
}
