/// Makes text that did not come from the user (server messages, usernames, appIDs, AAIDs, transaction text,
/// token labels) safe to write to a terminal: every character that a terminal would interpret, or that
/// hides or reorders text, is shown as a visible escape instead. Nothing is dropped, so what the user reads
/// is a faithful, if ugly, picture of what the server sent.
///
/// The escapes use Swift's spelling, `\u{1B}`, `\u{202E}` (hex, upper case, no leading zeros), and a
/// backslash is itself shown as `\\`: every backslash in the output starts an escape, so a server cannot
/// send the six characters `\u{1B}` and have them read like an escaped control (they show as `\\u{1B}`).
/// The output is reversible.
///
/// Escaped:
/// - C0 controls U+0000–U+001F (ESC, BEL, CR, backspace, …), DEL U+007F and C1 controls U+0080–U+009F
///   (CSI U+009B, OSC U+009D, …): a terminal interprets them. Newline and tab only in `.singleLine`.
/// - Every format character (general category Cf), which covers the bidi controls U+061C, U+200E, U+200F,
///   U+202A–U+202E, U+2066–U+2069 (they reorder what is shown, so a transaction could show another amount
///   than it signs), zero-width space U+200B, word joiner and invisible operators U+2060–U+2064, BOM U+FEFF,
///   interlinear annotation U+FFF9–U+FFFB, soft hyphen U+00AD and the tag characters U+E0001, U+E0020–U+E007F
///   (invisible text that some software still reads).
/// - Line and paragraph separators U+2028, U+2029 (categories Zl, Zp): some terminals break lines on them.
///
/// Kept: zero-width non-joiner U+200C and joiner U+200D, although they are Cf: Persian, Indic scripts and
/// emoji sequences need them, and on their own they neither hide nor reorder text. Combining marks,
/// variation selectors and private-use characters are kept as well. (Lone surrogates cannot occur in a
/// Swift `String`; invalid UTF-8 is refused before text gets here, see `TransactionContent.text`.)
public enum UntrustedText {
  public enum Layout: Sendable {
    /// One line (usernames, appIDs, AAIDs, server descriptions): newline and tab are escaped too.
    case singleLine
    /// Several lines (transaction text): newline (U+000A) and tab are kept; CR and every other control
    /// are still escaped.
    case multiLine
  }

  /// `text` with everything a terminal would interpret, and every invisible or reordering character, shown
  /// as a visible escape (see the type's documentation).
  public static func displayable(_ text: String, layout: Layout = .singleLine) -> String {
    // Printable ASCII without a backslash needs nothing (most text; the Unicode property look-up below is not free).
    if text.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\\") }) { return text }
    var out = String.UnicodeScalarView()
    for scalar in text.unicodeScalars {
      if scalar == "\\" {
        out.append(contentsOf: "\\\\".unicodeScalars)
      } else if needsEscape(scalar, layout) {
        out.append(contentsOf: "\\u{\(String(scalar.value, radix: 16, uppercase: true))}".unicodeScalars)
      } else {
        out.append(scalar)
      }
    }
    return String(out)
  }

  /// Whether `displayable` escapes `scalar` (a backslash is doubled, not escaped this way).
  public static func needsEscape(_ scalar: Unicode.Scalar, _ layout: Layout = .singleLine) -> Bool {
    switch scalar.value {
    case 0x0A, 0x09: return layout == .singleLine
    case 0x00...0x1F, 0x7F...0x9F: return true
    case 0x20...0x7E, 0x200C, 0x200D: return false
    default:
      switch scalar.properties.generalCategory {
      case .format, .lineSeparator, .paragraphSeparator, .control, .surrogate: return true
      default: return false
      }
    }
  }
}
