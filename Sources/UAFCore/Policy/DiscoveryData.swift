/// DisplayPNGCharacteristicsDescriptor (UAF Protocol v1.1 §3.5.2, Metadata Statement §3.5): what a PNG shown
/// for transaction confirmation must be.
public typealias DisplayPNGCharacteristicsDescriptor = DisplayPNGCharacteristics

/// The Client API's `Authenticator` dictionary (UAF Application API and Transport Binding v1.1 §3.1.3): what a
/// caller of discover() learns about one authenticator. Every field is required there except
/// `tcDisplayContentType` and `tcDisplayPNGCharacteristics`; the numbers are the FIDO Registry's constants.
public struct DiscoveredAuthenticator: Codable, Equatable, Sendable {
  public var title: String
  public var aaid: String
  public var description: String
  public var supportedUAFVersions: [Version]
  public var assertionScheme: String
  public var authenticationAlgorithm: UInt16
  public var attestationTypes: [UInt16]
  public var userVerification: UInt32
  public var keyProtection: UInt16
  public var matcherProtection: UInt16
  public var attachmentHint: UInt32
  public var isSecondFactorOnly: Bool
  public var tcDisplay: UInt16
  public var tcDisplayContentType: String?
  public var tcDisplayPNGCharacteristics: [DisplayPNGCharacteristicsDescriptor]?
  /// A `data:` URL of a PNG image (RFC 2397).
  public var icon: String
  public var supportedExtensionIDs: [String]

  /// The dictionary for an authenticator described by `d`, with the caller-facing `title` and `icon`.
  public init(_ d: AuthenticatorDescription, title: String, icon: String, supportedUAFVersions: [Version]) {
    self.title = title
    aaid = d.aaid
    description = d.description
    self.supportedUAFVersions = supportedUAFVersions
    assertionScheme = d.assertionScheme
    authenticationAlgorithm = d.authenticationAlgorithm
    attestationTypes = d.attestationTypes
    userVerification = d.userVerification
    keyProtection = d.keyProtection
    matcherProtection = d.matcherProtection
    attachmentHint = d.attachmentHint
    isSecondFactorOnly = d.isSecondFactorOnly
    tcDisplay = d.tcDisplay
    tcDisplayContentType = d.tcDisplay == 0 ? nil : d.tcDisplayContentType
    tcDisplayPNGCharacteristics = nil
    self.icon = icon
    supportedExtensionIDs = []
  }
}

/// The Client API's `DiscoveryData` dictionary (UAF Application API and Transport Binding v1.1 §3.1.2): what
/// discover() answers.
public struct DiscoveryData: Codable, Equatable, Sendable {
  public var supportedUAFVersions: [Version]
  public var clientVendor: String
  public var clientVersion: Version
  public var availableAuthenticators: [DiscoveredAuthenticator]

  public init(
    supportedUAFVersions: [Version], clientVendor: String, clientVersion: Version,
    availableAuthenticators: [DiscoveredAuthenticator]
  ) {
    self.supportedUAFVersions = supportedUAFVersions
    self.clientVendor = clientVendor
    self.clientVersion = clientVersion
    self.availableAuthenticators = availableAuthenticators
  }
}
