/// How the tries of a PIN or PUK read, in every front end (the CLI's lines, a pinentry dialog's description).
public enum TriesText {
  public static func of(_ s: PINStatus?) -> String {
    guard let s else { return "unknown" }
    if s.isBlocked { return "blocked" }
    guard let left = s.retriesLeft else {
      return s.isVerified ? "verified (count not shown)" : ErrorReport.untoldTries(s.kind)
    }
    var out = ErrorReport.triesLeft(left)
    if let max = s.maxRetries { out += " (of \(max))" }
    if s.isDefault == true { out += " (still the default \(s.kind.rawValue): change it)" }
    if s.powerCycleRequired == true { out += coolingDown }
    return out
  }

  /// After the tries of a FIDO2 key that takes no PIN until it is re-inserted (`PINStatus.powerCycleRequired`).
  public static let coolingDown = " (cooling down: remove and re-insert the key before the next PIN)"

  /// "Name (id): PIN 3 tries left (of 3)."
  public static func line(_ token: TokenInfo, _ s: PINStatus) -> String {
    "\(displayable(token.name)) (\(token.id)): \(s.kind.rawValue) \(of(s))."
  }
}
