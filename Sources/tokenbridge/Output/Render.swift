import TokenBridge

/// Human and JSON rendering of results. Text from tokens and servers goes through `displayable`.
enum Render {
  static func tries(_ s: PINStatus?) -> String { TriesText.of(s) }

  static var coolingDown: String { TriesText.coolingDown }

  /// PIN (and PUK) lines for a token of either kind.
  static func pinLines(_ t: TokenInfo) -> [String] {
    guard let f = t.fido2 else { return ["PIN: \(tries(t.pin))", "PUK: \(tries(t.puk))"] }
    guard f.pinIsSet else { return ["PIN: not set (tokenbridge pin set --token \(t.id))"] }
    var lines = ["PIN: \(tries(t.pin))", "PIN rules: \(f.minPINLength) or more characters, at most 63 bytes"]
    if let uv = f.uvRetries { lines.append("Built-in verification (UV): \(ErrorReport.triesLeft(uv))") }
    if f.forcePINChange { lines.append("The key asks for a new PIN: tokenbridge pin change --token \(t.id)") }
    return lines
  }

  static func triesLine(_ token: TokenInfo, _ s: PINStatus) -> String { TriesText.line(token, s) }

  /// The JSON of `value`, as every `--json` prints it (`JSONOutput`: JSONEncoder, pretty, sorted keys).
  static func json<T: Encodable>(_ value: T) -> String { JSONOutput.text(value) }
}
