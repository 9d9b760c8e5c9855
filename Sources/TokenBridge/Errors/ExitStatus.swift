/// The CLI's exit codes. Stable: scripts depend on them (README lists them). Never renumber; only add.
public enum ExitStatus: Int32, CaseIterable, Sendable {
  case success = 0
  case failure = 1
  case incomplete = 2
  case cancelled = 3
  case noToken = 4
  case serviceUnavailable = 5
  case wrongPIN = 6
  case pinBlocked = 7
  case pukBlocked = 8
  case policyViolation = 9
  case tokenRemoved = 10
  case unsupportedToken = 11
  case managementKeyRejected = 12
  case slotOccupied = 13
  case timedOut = 14
  case needsReinsertion = 15
  case pinNotSet = 16
  case serverRefused = 20
  case serverUnreachable = 21
  case noSuitableAuthenticator = 22
  case untrustedFacet = 23
  case badMessage = 24
  case localData = 25
  case unknownKey = 26
  case configuration = 27
  case payloadTokenExpired = 28
  case payloadAlreadyRedeemed = 29
  case payloadNotDecryptable = 30
  case payloadMalformed = 31
  case declined = 32
  case resetWindowMissed = 33
  case differentKey = 34
  case doctorFoundProblems = 35
  case usage = 64

  public var meaning: String {
    switch self {
    case .success: "success"
    case .failure: "unexpected error (the message says what happened)"
    case .incomplete: "tokenbridge provision: some rows of the plan are not done (the report says why, row by row)"
    case .cancelled: "cancelled by the user (or the last attempt was not confirmed)"
    case .noToken: "no token, or not the one named with --token, or several and no terminal to choose"
    case .serviceUnavailable: "the PC/SC service (pcscd) is not running"
    case .wrongPIN: "wrong PIN/PUK and no more input to try again (--pin-fd)"
    case .pinBlocked:
      "the PIN is blocked (PIV: unblock it with the PUK, tokenbridge pin unblock; FIDO2: only tokenbridge fido2 reset)"
    case .pukBlocked: "the PUK is blocked (only a reset of the PIV application helps)"
    case .policyViolation: "the new PIN/PUK breaks the policy and no more input to try again"
    case .tokenRemoved: "the token was removed during the operation"
    case .unsupportedToken: "the card is not a PIV card, or lacks a needed feature"
    case .managementKeyRejected: "the management key was not accepted"
    case .slotOccupied: "the key slot already holds a key and overwriting was not confirmed"
    case .timedOut: "no answer within the interaction timeout"
    case .needsReinsertion: "a FIDO2 key wants to be removed and re-inserted (too many wrong PINs in a row)"
    case .pinNotSet: "the FIDO2 key has no PIN yet (tokenbridge pin set), or wants it changed (pin change)"
    case .serverRefused: "the server refused the operation (its UAF status code is in the message)"
    case .serverUnreachable: "the server could not be reached, timed out, or answered an HTTP error"
    case .noSuitableAuthenticator: "no token here fits the server's policy (the message says why, per token)"
    case .untrustedFacet: "the appID's trusted facets do not include this client's facet ID"
    case .badMessage: "the UAF message is malformed, too large, or of an unsupported version"
    case .localData: "the local data (SQLite) could not be read or written"
    case .unknownKey: "the server does not know this key any more (1481), or there is no local registration"
    case .configuration: "no server configured, or a configuration value is wrong"
    case .payloadTokenExpired: "the out-of-band token expired or is unknown to the server"
    case .payloadAlreadyRedeemed: "the out-of-band token was used already"
    case .payloadNotDecryptable: "the out-of-band payload is encrypted for a key this client does not hold"
    case .payloadMalformed: "the out-of-band payload (QR code, link, push) is malformed"
    case .declined: "a destructive operation (FIDO2 reset, credential deletion) was not confirmed as asked"
    case .resetWindowMissed: "the FIDO2 key refused the reset: too long since it was plugged in (nothing erased)"
    case .differentKey: "the FIDO2 key that came back after the replug is another key (nothing reset)"
    case .doctorFoundProblems: "tokenbridge doctor found at least one problem (each printed with its fix)"
    case .usage: "bad arguments"
    }
  }
}
