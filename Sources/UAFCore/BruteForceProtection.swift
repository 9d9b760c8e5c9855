/// What the user is told about an authenticator's brute-force protection before a PIN is asked
/// (the mobile SDKs' `PinProtectionStatus`).
public enum ProtectionStatus: Equatable, Sendable {
  /// No failed attempt is known; `retriesLeft` when the token tells.
  case unlocked(retriesLeft: Int?)
  /// The last attempt failed; `retriesLeft` remain. `coolDownSeconds` > 0: no PIN is accepted until then.
  case lastAttemptFailed(retriesLeft: Int, coolDownSeconds: Int)
  /// No try left.
  case lockedOut

  /// Derives the status from what a token reports and whether the previous attempt in this flow failed.
  public static func from(retriesLeft: Int?, lastAttemptFailed: Bool, coolDownSeconds: Int = 0) -> ProtectionStatus {
    if retriesLeft == 0 { return .lockedOut }
    if lastAttemptFailed, let r = retriesLeft {
      return .lastAttemptFailed(retriesLeft: r, coolDownSeconds: coolDownSeconds)
    }
    return .unlocked(retriesLeft: retriesLeft)
  }

  /// True when the next attempt is the last one: the user must be warned and say yes first.
  public var isLastAttempt: Bool {
    switch self {
    case .unlocked(let r): r == 1
    case .lastAttemptFailed(let r, _): r == 1
    case .lockedOut: false
    }
  }
}
