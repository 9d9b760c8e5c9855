/// How a virtual FIDO2 key answers where real firmwares differ: one value per variation, consulted by the engine
/// (getInfo, clientPIN, makeCredential, credential management). `ctap21` is the key as written from the CTAP 2.1
/// specification; the others model firmwares nobody here wrote, from their sources (HardwareNotes.md names the
/// functions each field was read from).
public struct FIDO2Profile: Sendable {
  public var name: String
  /// getInfo versions (0x01), as listed.
  public var versions: [String]
  /// The CTAP commands it knows; any other answers CTAP1_ERR_INVALID_COMMAND.
  public var commands: Set<UInt8>
  /// getInfo options (0x04) besides `clientPin` (which follows the state). `pinUvAuthToken` true enables
  /// getPinUvAuthTokenUsingPinWithPermissions (0x09); `makeCredUvNotRqd` true lets makeCredential of a
  /// non-discoverable credential go without a token on a key with a PIN.
  public var options: [(String, Bool)]
  /// getInfo pinUvAuthProtocols (0x06), in order of preference; the only protocols accepted anywhere.
  public var pinProtocols: [Int]
  /// getInfo 0x0C forcePINChange, 0x0D minPINLength, 0x14 remainingDiscoverableCredentials (CTAP 2.1 fields).
  public var ctap21InfoFields: Bool
  /// getInfo 0x07 maxCredentialCountInList and 0x08 maxCredentialIdLength, when the firmware lists them.
  public var listLimits: (count: Int, idLength: Int)?
  /// What an unknown clientPIN subcommand or an unsupported PIN protocol gets.
  public var unsupportedPINRequest: CTAP2StatusCode
  /// getPINRetries checks the PIN protocol too (else any protocol, or none, is fine).
  public var getRetriesChecksProtocol: Bool
  /// getPINRetries answers the optional powerCycleState (0x04).
  public var reportsPowerCycleState: Bool
  /// What setPIN gets on a key that has a PIN.
  public var setPINWhenSet: CTAP2StatusCode
  /// Permissions of a token from the legacy getPinToken (0x05): CTAP 2.1 says mc|ga (0x03); a firmware without
  /// permissions lets it do everything, credential management (cm, 0x04) included.
  public var legacyTokenPermissions: UInt8
  /// Bytes of a PIN token (CTAP 2.1: 32; solo1: 16, which protocol 1 allows).
  public var pinTokenLength: Int
  /// The failure that spends the last PIN try answers PIN_BLOCKED (CTAP 2.1); else PIN_INVALID (or
  /// PIN_AUTH_BLOCKED), and only the next request learns the PIN is blocked.
  public var blockedOnLastFailure: Bool
  /// While the PIN is blocked, or 3 wrong PINs wait for a power cycle, makeCredential, getAssertion, credential
  /// management and setPIN/changePIN/getPinToken answer PIN_BLOCKED / PIN_AUTH_BLOCKED before reading the
  /// request (a firmware-wide lock, not only the PIN commands).
  public var lockoutRefusesEverything: Bool
  /// A token's first use in makeCredential/getAssertion binds it to that RP (CTAP 2.1 §6.1.2, §6.2.2); without
  /// it one token serves every RP and credential management too.
  public var bindsTokenToRP: Bool
  /// Without discoverable credentials, every credential management subcommand but getCredsMetadata answers
  /// success with an empty body (after its token check) instead of NO_CREDENTIALS.
  public var emptyCredentialManagementWhenNone: Bool
  /// enumerateRPs names each RP by the user name of its first credential (always present, maybe "").
  public var rpNameIsUserName: Bool

  func option(_ name: String) -> Bool? { options.first { $0.0 == name }?.1 }
  /// getPinUvAuthTokenUsingPinWithPermissions (0x09) is offered.
  var tokenWithPermissions: Bool { option("pinUvAuthToken") == true }

  /// The key as written from the CTAP 2.1 specification (the default).
  public static let ctap21 = FIDO2Profile(
    name: "ctap21", versions: ["FIDO_2_0", "FIDO_2_1_PRE", "FIDO_2_1"],
    commands: [0x01, 0x02, 0x04, 0x06, 0x07, 0x0A, 0x0B, 0x0D, 0x41],
    options: [
      ("rk", true), ("up", true), ("plat", false), ("pinUvAuthToken", true), ("credMgmt", true),
      ("credentialMgmtPreview", true), ("authnrCfg", true), ("setMinPINLength", true),
    ],
    pinProtocols: [2, 1], ctap21InfoFields: true, listLimits: nil, unsupportedPINRequest: .invalidParameter,
    getRetriesChecksProtocol: false, reportsPowerCycleState: true, setPINWhenSet: .pinAuthInvalid,
    legacyTokenPermissions: 0x03, pinTokenLength: 32, blockedOnLastFailure: true, lockoutRefusesEverything: false,
    bindsTokenToRP: true, emptyCredentialManagementWhenNone: false, rpNameIsUserName: false)

  /// A CTAP 2.0 key as the spec reads (`--ctap20`): FIDO_2_0 only, PIN protocol 1, pinUvAuthToken false, no
  /// authenticatorConfig; protocol 2 and 0x09 refused with INVALID_PARAMETER before any PIN check. Otherwise as
  /// `ctap21`.
  public static let ctap20: FIDO2Profile = {
    var p = ctap21
    p.name = "ctap20"
    p.versions = ["FIDO_2_0"]
    p.options = p.options.filter { !["authnrCfg", "setMinPINLength"].contains($0.0) }
      .map { $0.0 == "pinUvAuthToken" ? ($0.0, false) : $0 }
    p.commands.remove(0x0D)
    p.pinProtocols = [1]
    return p
  }()

  /// SoloKeys solo1 4.1.5 (fido2/ctap.c): U2F_V2, FIDO_2_0, FIDO_2_1_PRE; options rk, up, plat, credMgmt,
  /// clientPin (no pinUvAuthToken, no credentialMgmtPreview); PIN protocol 1 only; CTAP1_ERR_OTHER (0x7F) for an
  /// unknown clientPIN subcommand (0x09 included) or another protocol, getPINRetries included; 16-byte PIN
  /// tokens without permissions or RP; retries only (8), no powerCycleState; setPIN on a PIN: NOT_ALLOWED; a
  /// firmware-wide lockout; the last PIN try answers PIN_INVALID; empty credential management answers without
  /// credentials; RPs named by a user name; no selection (0x0B); maxCredentialCountInList 20,
  /// maxCredentialIdLength 128; no CTAP 2.1 fields.
  public static let solo1 = FIDO2Profile(
    name: "solo1", versions: ["U2F_V2", "FIDO_2_0", "FIDO_2_1_PRE"],
    commands: [0x01, 0x02, 0x04, 0x06, 0x07, 0x0A, 0x41],
    options: [("rk", true), ("up", true), ("plat", false), ("credMgmt", true)],
    pinProtocols: [1], ctap21InfoFields: false, listLimits: (20, 128), unsupportedPINRequest: .other,
    getRetriesChecksProtocol: true, reportsPowerCycleState: false, setPINWhenSet: .notAllowed,
    legacyTokenPermissions: 0x07, pinTokenLength: 16, blockedOnLastFailure: false, lockoutRefusesEverything: true,
    bindsTokenToRP: false, emptyCredentialManagementWhenNone: true, rpNameIsUserName: true)

  /// CanoKey (canokey-core applets/ctap/ctap.c): U2F_V2, FIDO_2_0, FIDO_2_1; options rk, credMgmt, clientPin,
  /// pinUvAuthToken, makeCredUvNotRqd (no up/plat listed); protocols 1 and 2; getPINRetries without
  /// powerCycleState; maxCredentialCountInList 8, maxCredentialIdLength 70, no CTAP 2.1 fields 0x0C/0x0D/0x14.
  /// (Its largeBlobs, credBlob, EdDSA are not modelled.)
  public static let canokey: FIDO2Profile = {
    var p = ctap21
    p.name = "canokey"
    p.versions = ["U2F_V2", "FIDO_2_0", "FIDO_2_1"]
    p.options = [("rk", true), ("credMgmt", true), ("pinUvAuthToken", true), ("makeCredUvNotRqd", true)]
    p.commands.remove(0x0D)
    p.pinProtocols = [1, 2]
    p.ctap21InfoFields = false
    p.listLimits = (8, 70)
    p.reportsPowerCycleState = false
    return p
  }()

  public static let all = [ctap21, ctap20, solo1, canokey]
  public static func named(_ name: String) -> FIDO2Profile? { all.first { $0.name == name } }
}

/// A CTAP status a profile names (the engine's CTAP2Status, public for profiles made elsewhere).
public enum CTAP2StatusCode: UInt8, Sendable {
  case invalidParameter = 0x02
  case notAllowed = 0x30
  case pinAuthInvalid = 0x33
  case other = 0x7F

  var status: CTAP2Status { CTAP2Status(rawValue: rawValue)! }
}
