import Testing
import UAFCore

@Suite struct PinPolicyTests {
  /// PIV's PIN policy (TokenBridge's `PinPolicy.pivPIN`): 6-8 digits.
  let piv = PinPolicy(lengths: 6...8, digitsOnly: true)

  @Test func acceptsSixToEightDigits() {
    for pin in ["123456", "1234567", "12345678"] { #expect(piv.validate(new: Array(pin.utf8)) == nil) }
  }

  @Test(arguments: [
    ("", PinValidationError.empty),
    ("12a456", .onlyNumbers),
    ("12345", .tooShort(minimum: 6)),
    ("123456789", .tooLong(maximum: 8)),
  ])
  func rejects(_ pin: String, _ expected: PinValidationError) {
    #expect(piv.validate(new: Array(pin.utf8)) == expected)
  }

  @Test func sameAsOldIsRefused() {
    #expect(piv.validate(new: Array("654321".utf8), old: Array("654321".utf8)) == .sameAsOld)
    #expect(piv.validate(new: Array("654321".utf8), old: Array("123456".utf8)) == nil)
  }

  @Test func firstFailureWinsInDocumentedOrder() {
    // Non-digits and too short: onlyNumbers comes first.
    #expect(piv.validate(new: Array("ab".utf8)) == .onlyNumbers)
    // Too long and same as old: tooLong comes first.
    let long = Array("123456789".utf8)
    #expect(piv.validate(new: long, old: long) == .tooLong(maximum: 8))
  }

  @Test func pukPolicyAllowsAnyBytes() {
    #expect(PinPolicy(lengths: 6...8, digitsOnly: false).validate(new: Array("abcdef".utf8)) == nil)
    #expect(PinPolicy(lengths: 6...8, digitsOnly: false).validate(new: Array("abcde".utf8)) == .tooShort(minimum: 6))
  }
}

@Suite struct ProtectionStatusTests {
  @Test func derivesStatus() {
    #expect(ProtectionStatus.from(retriesLeft: 3, lastAttemptFailed: false) == .unlocked(retriesLeft: 3))
    #expect(
      ProtectionStatus.from(retriesLeft: 2, lastAttemptFailed: true)
        == .lastAttemptFailed(retriesLeft: 2, coolDownSeconds: 0))
    #expect(ProtectionStatus.from(retriesLeft: 0, lastAttemptFailed: true) == .lockedOut)
    #expect(ProtectionStatus.from(retriesLeft: nil, lastAttemptFailed: false) == .unlocked(retriesLeft: nil))
  }

  @Test func lastAttemptIsFlagged() {
    #expect(ProtectionStatus.unlocked(retriesLeft: 1).isLastAttempt)
    #expect(ProtectionStatus.lastAttemptFailed(retriesLeft: 1, coolDownSeconds: 0).isLastAttempt)
    #expect(!ProtectionStatus.unlocked(retriesLeft: 2).isLastAttempt)
    #expect(!ProtectionStatus.unlocked(retriesLeft: nil).isLastAttempt)
    #expect(!ProtectionStatus.lockedOut.isLastAttempt)
  }
}
