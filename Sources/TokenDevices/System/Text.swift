// String helpers that full Foundation gave (String(format:), trimmingCharacters(in:)), without it (see POSIX.swift).

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

  /// Bytes as hex, two digits each, `separator` between them. Written into one byte buffer: a `String` per byte
  /// joined (and an AAGUID's spaces then removed with `replacing`) was 128K instructions per FIDO2 key listed.
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

/// Trimming as `trimmingCharacters(in:)` did, scalar by scalar.
public enum Trim {
  /// `s` without leading and trailing white space: `CharacterSet.whitespacesAndNewlines` (Unicode White_Space),
  /// or with `newlines: false` `CharacterSet.whitespaces` (spaces, category Zs, and tab); both sets also held
  /// U+200B ZERO WIDTH SPACE (a space separator in Unicode before 4.0.1), so it is trimmed too.
  public static func whitespace(_ s: some StringProtocol, newlines: Bool = true) -> String {
    scalars(s) {
      $0 == "\u{200B}"
        || (newlines ? $0.properties.isWhitespace : ($0 == "\t" || $0.properties.generalCategory == .spaceSeparator))
    }
  }

  /// `s` without the leading and trailing scalars `trimmed` holds for.
  public static func scalars(_ s: some StringProtocol, _ trimmed: (Unicode.Scalar) -> Bool) -> String {
    let u = s.unicodeScalars
    guard let first = u.firstIndex(where: { !trimmed($0) }), let last = u.lastIndex(where: { !trimmed($0) }) else {
      return ""
    }
    var out = String.UnicodeScalarView()
    out.append(contentsOf: u[first...last])
    return String(out)
  }
}
