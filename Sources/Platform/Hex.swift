/// Hex digits as `String(format: "%0Nx")` made them.
public enum Hex {
  /// `value` in hex, zero-padded to `width` digits ("%04x"; "%02X" with `uppercase`).
  public static func digits(_ value: some BinaryInteger, width: Int, uppercase: Bool = false) -> String {
    let s = String(value, radix: 16, uppercase: uppercase)
    return s.count >= width ? s : String(repeating: "0", count: width - s.count) + s
  }

  /// Bytes as lower-case hex without separators.
  public static func lowercase(_ bytes: some Sequence<UInt8>) -> String {
    string(bytes, uppercase: false, separator: nil)
  }

  /// Bytes as hex, two digits each, `separator` between them. Written into one byte buffer, not a `String` per
  /// byte joined (docs/performance.md).
  public static func string(_ bytes: some Sequence<UInt8>, uppercase: Bool, separator: UInt8?) -> String {
    let digits: StaticString = uppercase ? "0123456789ABCDEF" : "0123456789abcdef"
    var out: [UInt8] = []
    out.reserveCapacity(bytes.underestimatedCount * 3)
    digits.withUTF8Buffer { d in
      for b in bytes {
        if let separator, !out.isEmpty { out.append(separator) }
        out.append(d[Int(b >> 4)])
        out.append(d[Int(b & 0x0F)])
      }
    }
    return String(decoding: out, as: UTF8.self)
  }
}

extension Sequence where Element == UInt8 {
  /// Upper-case hex with a space between bytes, for traces and messages.
  public var hexString: String { Hex.string(self, uppercase: true, separator: UInt8(ascii: " ")) }
}

extension Array where Element == UInt8 {
  /// Parses hex, ignoring spaces and colons; `nil` on any other character or an odd count.
  public init?(hex: String) {
    let digits = hex.filter { !$0.isWhitespace && $0 != ":" }
    guard digits.count % 2 == 0 else { return nil }
    var out: [UInt8] = []
    out.reserveCapacity(digits.count / 2)
    var idx = digits.startIndex
    while idx < digits.endIndex {
      let next = digits.index(idx, offsetBy: 2)
      guard let b = UInt8(digits[idx..<next], radix: 16) else { return nil }
      out.append(b)
      idx = next
    }
    self = out
  }
}
