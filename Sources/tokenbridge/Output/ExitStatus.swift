import ArgumentParser

/// The CLI's exit codes. Stable: scripts depend on them (README lists them). Never renumber; only add.
enum ExitStatus: Int32, CaseIterable {
  case success = 0
  case failure = 1
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
  case usage = 64

  var code: ExitCode { ExitCode(rawValue) }

  var meaning: String {
    switch self {
    case .success: "success"
    case .failure: "unexpected error (the message says what happened)"
    case .cancelled: "cancelled by the user (or the last attempt was not confirmed)"
    case .noToken: "no token, or not the one named with --token, or several and no terminal to choose"
    case .serviceUnavailable: "the PC/SC service (pcscd) is not running"
    case .wrongPIN: "wrong PIN/PUK and no more input to try again (--pin-fd)"
    case .pinBlocked: "the PIN is blocked (unblock it with the PUK: tokenbridge pin unblock)"
    case .pukBlocked: "the PUK is blocked (only a reset of the PIV application helps)"
    case .policyViolation: "the new PIN/PUK breaks the policy and no more input to try again"
    case .tokenRemoved: "the token was removed during the operation"
    case .unsupportedToken: "the card is not a PIV card, or lacks a needed feature"
    case .managementKeyRejected: "the management key was not accepted"
    case .slotOccupied: "the key slot already holds a key and overwriting was not confirmed"
    case .timedOut: "no answer within the interaction timeout"
    case .usage: "bad arguments"
    }
  }
}
