import TokenDevices
import UAFCore

/// What each kind of token is as a UAF authenticator: the one source of the facts that policies are matched
/// against, that Discover answers (DiscoveryData) and that the metadata statements state, so the three cannot
/// disagree with each other or with what a registration carries (AAID, algorithm, key encoding, attestation).
///
/// - PIV card: the P-256 key is generated on the card and never leaves it (KEY_PROTECTION_HARDWARE |
///   SECURE_ELEMENT); the PIN is compared by the card (MATCHER_PROTECTION_ON_CHIP); user verification is the PIN
///   alone (USER_VERIFY_PASSCODE).
/// - FIDO2 key: the UAF key is derived on the host from the key's hmac-secret output each time it signs, so it
///   exists in host memory while it is used: KEY_PROTECTION_SOFTWARE, the truthful flag (the secret it is derived
///   from stays in the key). The PIN is compared by the key (ON_CHIP) and every use needs a touch as well:
///   USER_VERIFY_PASSCODE | PRESENCE | ALL.
/// - Both: external and wired (USB) attachment; transaction text shown by the client (pinentry) before the
///   token signs its hash, so TRANSACTION_CONFIRMATION_DISPLAY_ANY with `text/plain` (no privileged or hardware
///   display: the token has none); ECDSA P-256 SHA-256 signatures DER-encoded, public keys as raw X9.62 points,
///   assertion scheme UAFV1TLV; not second-factor-only (authentication works without a username).
public enum AuthenticatorProfile {
  /// ASSERTION_INFO's authenticator version in every assertion this client makes.
  public static let authenticatorVersion: UInt16 = 1
  /// The UAF versions the authenticators speak (the client's `Version.supported`, oldest first).
  public static let supportedUAFVersions: [Version] = [.uaf10, .uaf11]
  public static let publicKeyAlgAndEncoding = UAFAlgorithm.eccX962Raw
  public static let authenticationAlgorithm = UAFAlgorithm.secp256r1ECDSASHA256DER

  public static func aaid(_ kind: TokenKind, _ configuration: Configuration) -> String {
    kind == .piv ? configuration.pivAAID : configuration.fido2AAID
  }

  /// A short title for a kind (the Client API's `Authenticator.title`).
  public static func title(_ kind: TokenKind) -> String {
    kind == .piv ? "PIV smart card" : "FIDO2 security key"
  }

  /// The description every statement and discovery of a kind carries.
  public static func summary(_ kind: TokenKind) -> String {
    kind == .piv
      ? "TokenBridge: a PIV smart card as a UAF authenticator (P-256 key generated on the card, PIN verified by the card)"
      : "TokenBridge: a FIDO2 security key as a UAF authenticator (key derived from hmac-secret, PIN and touch on the key)"
  }

  /// The attestation a registration of `kind` carries under `configuration`.
  public static func attestationTypes(_ kind: TokenKind, _ configuration: Configuration) -> [UInt16] {
    kind == .piv && configuration.attestationSlot != nil
      ? [UAFConstant.attestationBasicFull] : [UAFConstant.attestationBasicSurrogate]
  }

  /// The facts of one authenticator of `kind` under `configuration`; `keyIDs`: its registrations for the appID.
  public static func description(
    _ kind: TokenKind, configuration: Configuration, keyIDs: [String] = []
  ) -> AuthenticatorDescription {
    description(
      kind, aaid: aaid(kind, configuration), attestationTypes: attestationTypes(kind, configuration), keyIDs: keyIDs)
  }

  /// The facts of one authenticator of `kind` with its AAID and attestation types.
  public static func description(
    _ kind: TokenKind, aaid: String, attestationTypes: [UInt16], keyIDs: [String] = []
  ) -> AuthenticatorDescription {
    AuthenticatorDescription(
      aaid: aaid, description: summary(kind), authenticatorVersion: authenticatorVersion,
      userVerification: kind == .piv
        ? UAFConstant.userVerifyPasscode
        : UAFConstant.userVerifyPasscode | UAFConstant.userVerifyPresence | UAFConstant.userVerifyAll,
      keyProtection: kind == .piv
        ? UAFConstant.keyProtectionHardware | UAFConstant.keyProtectionSecureElement
        : UAFConstant.keyProtectionSoftware,
      matcherProtection: UAFConstant.matcherProtectionOnChip,
      attachmentHint: UAFConstant.attachmentExternal | UAFConstant.attachmentWired,
      tcDisplay: UAFConstant.tcDisplayAny, tcDisplayContentType: "text/plain", isSecondFactorOnly: false,
      authenticationAlgorithm: authenticationAlgorithm, assertionScheme: "UAFV1TLV",
      attestationTypes: attestationTypes, keyIDs: keyIDs)
  }

  /// The Client API's `Authenticator` dictionary for one token of `kind` (its name as the title's detail).
  public static func discovered(_ kind: TokenKind, name: String?, configuration: Configuration)
    -> DiscoveredAuthenticator
  {
    let t = name.map { "\(title(kind)): \(displayable($0))" } ?? title(kind)
    return DiscoveredAuthenticator(
      description(kind, configuration: configuration), title: t, icon: icon,
      supportedUAFVersions: supportedUAFVersions)
  }

  /// DiscoveryData for the tokens listed (a composite token is one authenticator per kind: `TokenInfo.sides`).
  public static func discoveryData(_ tokens: [TokenInfo], configuration: Configuration) -> DiscoveryData {
    let sides = tokens.flatMap(\.sides)
    return DiscoveryData(
      supportedUAFVersions: supportedUAFVersions, clientVendor: "TokenBridge", clientVersion: TokenBridgeVersion.uaf,
      availableAuthenticators: sides.map { discovered($0.kind, name: $0.name, configuration: configuration) })
  }
}
