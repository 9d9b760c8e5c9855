/// Constants used in policies (FIDO Registry of Predefined Values §3.1-3.5).
public enum UAFConstant {
  public static let userVerifyPasscode: UInt32 = 0x4
  public static let userVerifyPresence: UInt32 = 0x1
  public static let userVerifyAll: UInt32 = 0x400
  public static let keyProtectionSoftware: UInt16 = 0x1
  public static let keyProtectionHardware: UInt16 = 0x2
  public static let keyProtectionSecureElement: UInt16 = 0x8
  public static let matcherProtectionOnChip: UInt16 = 0x4
  public static let attachmentExternal: UInt32 = 0x2
  public static let attachmentWired: UInt32 = 0x4
  /// TRANSACTION_CONFIRMATION_DISPLAY_ANY: some form of transaction confirmation display is available.
  public static let tcDisplayAny: UInt16 = 0x1
  public static let attestationBasicFull: UInt16 = 0x3E07
  public static let attestationBasicSurrogate: UInt16 = 0x3E08
}

/// What a UAF authenticator says about itself: the facts policies are matched against.
public struct AuthenticatorDescription: Equatable, Sendable {
  public var aaid: String
  public var description: String
  public var authenticatorVersion: UInt16
  public var userVerification: UInt32
  public var keyProtection: UInt16
  public var matcherProtection: UInt16
  public var attachmentHint: UInt32
  public var tcDisplay: UInt16
  /// The MIME type of the transaction content it shows (when `tcDisplay` is not 0).
  public var tcDisplayContentType: String
  /// Whether it can only be a second factor (needs a username from the server to authenticate).
  public var isSecondFactorOnly: Bool
  public var authenticationAlgorithm: UInt16
  public var assertionScheme: String
  public var attestationTypes: [UInt16]
  /// KeyIDs (base64url) registered with this authenticator for the appID at hand.
  public var keyIDs: [String]

  public init(
    aaid: String, description: String, authenticatorVersion: UInt16 = 1,
    userVerification: UInt32 = UAFConstant.userVerifyPasscode,
    keyProtection: UInt16 = UAFConstant.keyProtectionHardware | UAFConstant.keyProtectionSecureElement,
    matcherProtection: UInt16 = UAFConstant.matcherProtectionOnChip,
    attachmentHint: UInt32 = UAFConstant.attachmentExternal | UAFConstant.attachmentWired, tcDisplay: UInt16 = 0,
    tcDisplayContentType: String = "text/plain", isSecondFactorOnly: Bool = false,
    authenticationAlgorithm: UInt16 = UAFAlgorithm.secp256r1ECDSASHA256DER, assertionScheme: String = "UAFV1TLV",
    attestationTypes: [UInt16] = [UAFConstant.attestationBasicSurrogate], keyIDs: [String] = []
  ) {
    self.aaid = aaid
    self.description = description
    self.authenticatorVersion = authenticatorVersion
    self.userVerification = userVerification
    self.keyProtection = keyProtection
    self.matcherProtection = matcherProtection
    self.attachmentHint = attachmentHint
    self.tcDisplay = tcDisplay
    self.tcDisplayContentType = tcDisplayContentType
    self.isSecondFactorOnly = isSecondFactorOnly
    self.authenticationAlgorithm = authenticationAlgorithm
    self.assertionScheme = assertionScheme
    self.attestationTypes = attestationTypes
    self.keyIDs = keyIDs
  }
}
