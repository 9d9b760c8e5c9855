import Foundation
import Testing
import TokenDevices

/// A PIN or PUK outside the PIV reference-data format (6–8 bytes, SP 800-73-4 Part 2 §2.4.3) is refused by `PIVSession`
/// before any APDU, so it costs no try (the device layer's half; the CLI's is in Tests/cli/test_hostile_input.py).
/// Checked through the real pcscd against the virtual card, which (like a real card) counts a 5-byte PIN as a wrong
/// one. Part of the serialized PIV suite: its cards share the vpcd slots.
extension PIVThroughPCSCDTests {
  var short: [UInt8] { Array("12345".utf8) }
  var long: [UInt8] { Array("123456789".utf8) }

  func tries(_ s: PIVSession) throws -> (pin: Int?, puk: Int?) {
    (try s.pinStatus(.pin).retriesLeft, try s.pinStatus(.puk).retriesLeft)
  }

  @Test func verifyRefusesAFiveOrNineBytePINWithoutSpendingATry() throws {
    let card = try VirtualCard()
    let s = try card.open()
    #expect(throws: TokenError.pinFormat(.pin, .tooShort(minimum: 6))) { try s.verifyPIN(short) }
    #expect(throws: TokenError.pinFormat(.pin, .tooLong(maximum: 8))) { try s.verifyPIN(long) }
    #expect(throws: TokenError.pinFormat(.pin, .tooShort(minimum: 6))) { try s.verifyPIN([]) }
    #expect(try tries(s) == (3, 3))
    try s.verifyPIN(Array("123456".utf8))  // the card itself is fine
  }

  @Test func changeChecksTheCurrentAndTheNewValueFirst() throws {
    let card = try VirtualCard()
    let s = try card.open()
    #expect(throws: TokenError.pinFormat(.pin, .tooShort(minimum: 6))) {
      try s.changeReference(.pin, old: short, new: Array("111111".utf8))
    }
    #expect(throws: TokenError.pinFormat(.pin, .tooLong(maximum: 8))) {
      try s.changeReference(.pin, old: long, new: Array("111111".utf8))
    }
    // A correct current PIN with a new one the format refuses: nothing sent, the PIN is unchanged.
    #expect(throws: TokenError.pinFormat(.pin, .tooShort(minimum: 6))) {
      try s.changeReference(.pin, old: Array("123456".utf8), new: short)
    }
    #expect(throws: TokenError.pinFormat(.puk, .tooShort(minimum: 6))) {
      try s.changeReference(.puk, old: short, new: Array("87654321".utf8))
    }
    #expect(try tries(s) == (3, 3))
    try s.verifyPIN(Array("123456".utf8))
  }

  @Test func unblockChecksThePUKAndTheNewPINFirst() throws {
    let card = try VirtualCard()
    let s = try card.open()
    #expect(throws: TokenError.pinFormat(.puk, .tooShort(minimum: 6))) {
      try s.unblockPIN(puk: short, newPIN: Array("222222".utf8))
    }
    #expect(throws: TokenError.pinFormat(.puk, .tooLong(maximum: 8))) {
      try s.unblockPIN(puk: long, newPIN: Array("222222".utf8))
    }
    #expect(throws: TokenError.pinFormat(.pin, .tooShort(minimum: 6))) {
      try s.unblockPIN(puk: Array("12345678".utf8), newPIN: short)
    }
    #expect(try tries(s) == (3, 3))
    try s.verifyPIN(Array("123456".utf8))  // the PIN was not replaced
  }
}
