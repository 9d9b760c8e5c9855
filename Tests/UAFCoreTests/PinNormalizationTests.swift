import Foundation
import Testing

@testable import UAFCore

/// Passwords are NFC-normalised with the standard library's normaliser (FoundationEssentials has no
/// `precomposedStringWithCanonicalMapping`): the same bytes as Foundation's.
@Suite struct PinNormalizationTests {
  @Test func nfcMatchesFoundation() {
    let samples = [
      "e\u{301}", "\u{212B}", "A\u{30A}", "\u{1100}\u{1161}\u{11A8}", "\u{FB01}", "q\u{307}\u{323}", "\u{0958}",
      "\u{2126}", "o\u{308}\u{304}", "\u{1E9B}\u{323}", "pässwörd", "1234", "ﬀ\u{1D15E}", "\u{0F73}", "",
    ]
    for s in samples {
      #expect(
        PasswordPolicy.normalized(Array(s.utf8)) == Array(s.precomposedStringWithCanonicalMapping.utf8),
        "\(s.unicodeScalars.map { String($0.value, radix: 16) })")
    }
  }
}
