import TokenBridge

/// Human and JSON rendering of results. Text from tokens and servers goes through `displayable`.
enum Render {
  static func tries(_ s: PINStatus?) -> String {
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
  static let coolingDown = " (cooling down: remove and re-insert the key before the next PIN)"

  /// PIN (and PUK) lines for a token of either kind.
  static func pinLines(_ t: TokenInfo) -> [String] {
    guard let f = t.fido2 else { return ["PIN: \(tries(t.pin))", "PUK: \(tries(t.puk))"] }
    guard f.pinIsSet else { return ["PIN: not set (tokenbridge pin set --token \(t.id))"] }
    var lines = ["PIN: \(tries(t.pin))", "PIN rules: \(f.minPINLength) or more characters, at most 63 bytes"]
    if let uv = f.uvRetries { lines.append("Built-in verification (UV): \(ErrorReport.triesLeft(uv))") }
    if f.forcePINChange { lines.append("The key asks for a new PIN: tokenbridge pin change --token \(t.id)") }
    return lines
  }

  static func triesLine(_ token: TokenInfo, _ s: PINStatus) -> String {
    "\(displayable(token.name)) (\(token.id)): \(s.kind.rawValue) \(tries(s))."
  }

  /// The JSON of `value`, as every `--json` prints it (`JSONOutput`: JSONEncoder, pretty, sorted keys).
  static func json<T: Encodable>(_ value: T) -> String { JSONOutput.text(value) }
}
