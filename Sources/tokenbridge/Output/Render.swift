import FoundationEssentials
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

  /// Pretty JSON with sorted keys (the output every `--json` promises). `JSONText` writes what `JSONEncoder`
  /// would, without its cost (issue 12: 693K of one token's 1.75M instructions); a value it does not handle (a
  /// `Date`, `Data`, `URL`, `Decimal` or floating-point number inside) goes to `JSONEncoder`. Debug builds (the
  /// CLI tests run them) write every value both ways and stop at the first difference.
  static func json<T: Encodable>(_ value: T) -> String {
    let fast = try? JSONText.encode(value, unsupported: [Data.self, Date.self, URL.self, Decimal.self])
    #if DEBUG
      if let fast, fast != foundationJSON(value) {
        fatalError("JSONText and JSONEncoder differ:\n\(fast)\n---\n\(foundationJSON(value))")
      }
    #endif
    return fast ?? foundationJSON(value)
  }

  static func foundationJSON<T: Encodable>(_ value: T) -> String {
    let enc = JSONEncoder()
    enc.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    return (try? String(decoding: enc.encode(value), as: UTF8.self)) ?? "null"
  }
}
