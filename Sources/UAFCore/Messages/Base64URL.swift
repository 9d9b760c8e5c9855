import FoundationEssentials

/// base64url without padding (RFC 4648 §5), as UAF uses it everywhere.
public enum Base64URL {
  public static func encode(_ bytes: [UInt8]) -> String {
    Data(bytes).base64EncodedString().replacing("+", with: "-").replacing("/", with: "_").replacing("=", with: "")
  }

  /// Decodes base64url with or without padding; nil on any character outside the URL-safe alphabet
  /// (`A–Z a–z 0–9 - _`; so `+`, `/`, whitespace are refused), on misplaced or excess `=`, and on a length no
  /// encoding has.
  public static func decode(_ s: String) -> [UInt8]? {
    var chars = Array(s.utf8)
    var padding = 0
    while chars.last == UInt8(ascii: "=") {
      chars.removeLast()
      padding += 1
    }
    guard padding <= 2, padding == 0 || (chars.count + padding) % 4 == 0, chars.count % 4 != 1 else { return nil }
    var standard: [UInt8] = []
    standard.reserveCapacity(chars.count + 3)
    for c in chars {
      switch c {
      case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
        UInt8(ascii: "0")...UInt8(ascii: "9"):
        standard.append(c)
      case UInt8(ascii: "-"): standard.append(UInt8(ascii: "+"))
      case UInt8(ascii: "_"): standard.append(UInt8(ascii: "/"))
      default: return nil
      }
    }
    standard += Array(repeating: UInt8(ascii: "="), count: (4 - chars.count % 4) % 4)
    return Data(base64Encoded: Data(standard)).map { Array($0) }
  }

  /// Decodes base64url as UAF writes it: without padding (UAF Protocol v1.1 §3, "base64url … without padding").
  /// nil on `=` anywhere, and wherever `decode` answers nil.
  public static func decodeUnpadded(_ s: String) -> [UInt8]? {
    guard !s.utf8.contains(UInt8(ascii: "=")) else { return nil }
    return decode(s)
  }
}
