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
