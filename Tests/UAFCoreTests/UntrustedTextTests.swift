import Testing
import UAFCore

/// Server text is shown with visible escapes, never interpreted, never dropped.
@Suite struct UntrustedTextTests {
  func shown(_ s: String, _ layout: UntrustedText.Layout = .singleLine) -> String {
    UntrustedText.displayable(s, layout: layout)
  }

  @Test func bidiOverrideInATransactionIsShownAsEscapes() throws {
    let text = "Pay \u{202E}001\u{202C} EUR"
    #expect(TransactionContent.sanitized(text) == #"Pay \u{202E}001\u{202C} EUR"#)
    // The signed hash stays over the original bytes.
    let t = Transaction(contentType: "text/plain", content: Base64URL.encode(Array(text.utf8)))
    let decoded = try TransactionContent.text(t)
    #expect(decoded.bytes == Array(text.utf8))
    #expect(decoded.text == text)
  }

  @Test(arguments: [
    ("\u{202A}", #"\u{202A}"#), ("\u{202B}", #"\u{202B}"#), ("\u{202C}", #"\u{202C}"#), ("\u{202D}", #"\u{202D}"#),
    ("\u{202E}", #"\u{202E}"#), ("\u{2066}", #"\u{2066}"#), ("\u{2067}", #"\u{2067}"#), ("\u{2068}", #"\u{2068}"#),
    ("\u{2069}", #"\u{2069}"#), ("\u{200E}", #"\u{200E}"#), ("\u{200F}", #"\u{200F}"#), ("\u{061C}", #"\u{61C}"#),
  ])
  func everyBidiControlIsEscaped(_ input: String, _ expected: String) {
    #expect(shown("a\(input)b") == "a\(expected)b")
    #expect(shown("a\(input)b", .multiLine) == "a\(expected)b")
  }

  @Test func c0ControlsDelAndC1ControlsAreEscaped() {
    #expect(shown("\u{0}\u{1}\u{7}\u{8}\u{D}\u{1B}\u{1F}") == #"\u{0}\u{1}\u{7}\u{8}\u{D}\u{1B}\u{1F}"#)
    #expect(shown("x\u{7F}y") == #"x\u{7F}y"#)
    #expect(shown("\u{80}\u{85}\u{9B}\u{9D}\u{9F}") == #"\u{80}\u{85}\u{9B}\u{9D}\u{9F}"#)
    // U+00A0 (no-break space) is just after C1: shown as it is.
    #expect(shown("a\u{A0}b") == "a\u{A0}b")
  }

  /// Printable ASCII takes a fast path: it must agree with the scalar-by-scalar one on every byte.
  @Test func everyAsciiByteAloneAndInTextIsShownAsBefore() {
    for b in UInt8(0)...0x7F {
      let s = String(decoding: [0x61, b, 0x62], as: UTF8.self)
      let expected: String
      switch b {
      case 0x5C: expected = #"a\\b"#
      case 0x20...0x7E: expected = s
      default: expected = #"a\u{"# + String(b, radix: 16, uppercase: true) + "}b"
      }
      #expect(shown(s) == expected, "byte \(b)")
    }
    #expect(shown("PIV card in Virtual PCD 00 00 (piv-5000000)") == "PIV card in Virtual PCD 00 00 (piv-5000000)")
  }

  @Test func csiSequenceBecomesVisibleText() {
    #expect(shown("\u{1B}[31mred\u{1B}[0m") == #"\u{1B}[31mred\u{1B}[0m"#)
    #expect(TransactionContent.sanitized("Pay 10 CHF\u{1B}[2J to Bob") == #"Pay 10 CHF\u{1B}[2J to Bob"#)
  }

  @Test func osc8HyperlinkIsShownNotFollowed() {
    let link = "\u{1B}]8;;https://evil.example/\u{1B}\\click\u{1B}]8;;\u{1B}\\"
    #expect(shown(link) == #"\u{1B}]8;;https://evil.example/\u{1B}\\click\u{1B}]8;;\u{1B}\\"#)
    // The BEL-terminated form too, and the 8-bit OSC (U+009D) with ST (U+009C).
    #expect(shown("\u{1B}]0;title\u{7}x") == #"\u{1B}]0;title\u{7}x"#)
    #expect(shown("\u{9D}8;;u\u{9C}x") == #"\u{9D}8;;u\u{9C}x"#)
  }

  @Test func newlineAndTabKeptOnlyForMultiLineText() {
    #expect(shown("alice\nroot\tx") == #"alice\u{A}root\u{9}x"#)
    #expect(shown("line 1\nline 2\tx", .multiLine) == "line 1\nline 2\tx")
    // CR would let a line overwrite itself: escaped in both layouts.
    #expect(shown("Pay 1000\r   1", .multiLine) == #"Pay 1000\u{D}   1"#)
  }

  @Test func backslashIsDoubledSoEscapesCannotBeForged() {
    // The six characters \u{1B} sent as text must not look like an escaped ESC.
    #expect(shown(#"a\u{1B}b"#) == #"a\\u{1B}b"#)
    #expect(shown("a\u{1B}b") == #"a\u{1B}b"#)
    #expect(shown(#"DOMAIN\alice"#) == #"DOMAIN\\alice"#)
  }

  @Test func invisibleAndFormatCharactersAreEscaped() {
    let cases: [(String, String)] = [
      ("\u{200B}", #"\u{200B}"#), ("\u{2028}", #"\u{2028}"#), ("\u{2029}", #"\u{2029}"#), ("\u{FEFF}", #"\u{FEFF}"#),
      ("\u{FFF9}", #"\u{FFF9}"#), ("\u{FFFA}", #"\u{FFFA}"#), ("\u{FFFB}", #"\u{FFFB}"#), ("\u{2060}", #"\u{2060}"#),
      ("\u{00AD}", #"\u{AD}"#), ("\u{E0041}", #"\u{E0041}"#),
    ]
    for (input, expected) in cases {
      #expect(shown("a\(input)b") == "a\(expected)b")
      #expect(shown("a\(input)b", .multiLine) == "a\(expected)b")
    }
  }

  @Test func ordinaryTextIncludingJoinersIsUnchanged() {
    for s in ["alice@example.com", "Zürich 10 €", "数字", "مرحبا", "👨‍👩‍👧", "می‌خواهم", "e\u{301}", "7B1D#0001"] {
      #expect(shown(s) == s)
    }
  }
}
