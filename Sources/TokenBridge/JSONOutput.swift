import FoundationEssentials

/// The JSON every `--json` prints: `JSONEncoder`'s text of an `Encodable` value, pretty-printed (two-space
/// indent), keys sorted by their UTF-8 bytes so that the same value always prints the same text (tests and
/// scripts can compare outputs; a consumer should still not rely on the order), and `/` left unescaped (PEM
/// keys, URLs). Optional fields that are nil are left out (synthesized `encodeIfPresent`), not written as null.
/// Text from tokens and servers is escaped by the encoder (quote, backslash, control characters).
public enum JSONOutput {
  public static func text<T: Encodable>(_ value: T) -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    // The encoder refuses only values the CLI never prints (a non-finite floating-point number, a top-level
    // value that encodes nothing).
    guard let data = try? encoder.encode(value) else { return "null" }
    return String(decoding: data, as: UTF8.self)
  }

  /// The same JSON on one line (a notice on stderr beside a command's own output).
  public static func line<T: Encodable>(_ value: T) -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    guard let data = try? encoder.encode(value) else { return "null" }
    return String(decoding: data, as: UTF8.self)
  }
}
