import FoundationEssentials
import Platform
import TokenDevices

/// What JSONSerialization gave the client (FoundationEssentials has none): objects read into `JSONValue`
/// (Configuration.swift; its numbers are Doubles, as JSONSerialization's Foundation objects read them) and written
/// back as JSONSerialization wrote them.
extension JSONValue {
  /// The JSON object in `bytes`; nil when they are not JSON or not an object (as
  /// `JSONSerialization.jsonObject(with:) as? [String: Any]`).
  static func parseObject(_ bytes: some Collection<UInt8>) -> [String: JSONValue]? {
    guard case .object(let o)? = try? JSONDecoder().decode(JSONValue.self, from: Data(bytes)) else { return nil }
    return o
  }

  var asString: String? {
    if case .string(let s) = self { return s }
    return nil
  }

  var asObject: [String: JSONValue]? {
    if case .object(let o) = self { return o }
    return nil
  }

  /// The value as JSONSerialization wrote it (no options): no white space, `/` escaped as `\/`, control characters
  /// as `\b \f \n \r \t` or `\u00xx`, numbers as Swift prints a Double less a trailing ".0" (1, 1.5, 1e+20).
  /// Object members in key order (JSONSerialization's order was the dictionary's, which varies from run to run).
  var serialized: [UInt8] {
    var out: [UInt8] = []
    write(to: &out)
    return out
  }

  private func write(to out: inout [UInt8]) {
    switch self {
    case .null: out.append(contentsOf: "null".utf8)
    case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
    case .number(let n):
      var s = "\(n)"
      if s.hasSuffix(".0") { s.removeLast(2) }
      out.append(contentsOf: s.utf8)
    case .string(let s): Self.write(string: s, to: &out)
    case .array(let a):
      out.append(UInt8(ascii: "["))
      for (i, v) in a.enumerated() {
        if i > 0 { out.append(UInt8(ascii: ",")) }
        v.write(to: &out)
      }
      out.append(UInt8(ascii: "]"))
    case .object(let o):
      out.append(UInt8(ascii: "{"))
      for (i, key) in o.keys.sorted().enumerated() {
        if i > 0 { out.append(UInt8(ascii: ",")) }
        Self.write(string: key, to: &out)
        out.append(UInt8(ascii: ":"))
        o[key]!.write(to: &out)
      }
      out.append(UInt8(ascii: "}"))
    }
  }

  private static let hexDigits = Array("0123456789abcdef".utf8)

  /// Appends without a temporary array per escape: the browser host writes whole UAF messages, a `\"` in every
  /// few bytes.
  private static func write(string: String, to out: inout [UInt8]) {
    out.append(UInt8(ascii: "\""))
    for b in string.utf8 {
      switch b {
      case UInt8(ascii: "\""): out.append(contentsOf: #"\""#.utf8)
      case UInt8(ascii: "\\"): out.append(contentsOf: #"\\"#.utf8)
      case UInt8(ascii: "/"): out.append(contentsOf: #"\/"#.utf8)
      case 0x08: out.append(contentsOf: #"\b"#.utf8)
      case 0x0C: out.append(contentsOf: #"\f"#.utf8)
      case 0x0A: out.append(contentsOf: #"\n"#.utf8)
      case 0x0D: out.append(contentsOf: #"\r"#.utf8)
      case 0x09: out.append(contentsOf: #"\t"#.utf8)
      case 0..<0x20:
        out.append(contentsOf: #"\u00"#.utf8)
        out.append(Self.hexDigits[Int(b >> 4)])
        out.append(Self.hexDigits[Int(b & 0xF)])
      default: out.append(b)
      }
    }
    out.append(UInt8(ascii: "\""))
  }
}
