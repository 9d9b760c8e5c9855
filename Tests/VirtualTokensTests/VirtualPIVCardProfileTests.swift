import Testing

@testable import VirtualTokens

/// The virtual card's profiles against SP 800-73-4's bytes: a card without YubiKey's extensions, each
/// empty-slot word, 9000-without-algorithm for an empty slot's metadata, other PIN try counts.
@Suite struct VirtualPIVCardProfileTests {
  func send(_ card: VirtualPIVCard, _ apdu: [UInt8]) -> (data: [UInt8], sw: UInt16) {
    let r = card.process(apdu)
    return (Array(r.dropLast(2)), UInt16(r[r.count - 2]) << 8 | UInt16(r[r.count - 1]))
  }

  static let verify123456: [UInt8] = [0x00, 0x20, 0x00, 0x80, 0x08] + Array("123456".utf8) + [0xFF, 0xFF]
  static let signIn9C: [UInt8] = {
    let body: [UInt8] = [0x7C, 0x24, 0x82, 0x00, 0x81, 0x20] + [UInt8](repeating: 1, count: 32)
    return [0x00, 0x87, 0x11, 0x9C, UInt8(body.count)] + body
  }()

  @Test func genericAnswersNoYubicoInstructionAndNamesNoVendor() {
    let card = VirtualPIVCard(state: .factory(serial: 7, pinTries: 5), profile: .generic)
    #expect(send(card, [0x00, 0xA4, 0x04, 0x00, 0x05, 0xA0, 0x00, 0x00, 0x03, 0x08]).sw == 0x9000)
    for ins: UInt8 in [0xFD, 0xF8, 0xF7, 0xFA, 0xFB, 0xFF] {
      #expect(send(card, [0x00, ins, 0x00, 0x80]).sw == 0x6D00, "INS \(ins)")
    }
    #expect(card.atr != VirtualPIVCard.atr)
    #expect(send(card, [0x00, 0x20, 0x00, 0x80]).sw == 0x63C5)  // 5 tries
    // Standard PIV still works: CHUID, VERIFY and VERIFY P1=FF (SP 800-73-4 Part 2 §3.2.1).
    #expect(send(card, [0x00, 0xCB, 0x3F, 0xFF, 0x05, 0x5C, 0x03, 0x5F, 0xC1, 0x02, 0x00]).sw == 0x9000)
    #expect(send(card, Self.verify123456).sw == 0x9000)
    #expect(send(card, [0x00, 0x20, 0xFF, 0x80]).sw == 0x9000)
    #expect(send(card, [0x00, 0x20, 0x00, 0x80]).sw == 0x63C5)
  }

  @Test(arguments: PIVCardProfile.emptySlotWords)
  func anEmptySlotIsSaidWithTheProfilesWord(word: UInt16) {
    var profile = PIVCardProfile.generic
    profile.emptySlotStatus = word
    let card = VirtualPIVCard(state: .factory(serial: 7), profile: profile)
    _ = send(card, Self.verify123456)
    #expect(send(card, Self.signIn9C).sw == word)
    // An absent data object stays 6A82 (SP 800-73-4 Part 2 §3.1.2) whatever the slot word.
    #expect(send(card, [0x00, 0xCB, 0x3F, 0xFF, 0x05, 0x5C, 0x03, 0x5F, 0xC1, 0x0A, 0x00]).sw == 0x6A82)
    var yubikey = PIVCardProfile.yubikey
    yubikey.emptySlotStatus = word
    #expect(send(VirtualPIVCard(state: .factory(serial: 7), profile: yubikey), [0x00, 0xF7, 0x00, 0x9C]).sw == word)
  }

  @Test func metadataOfAnEmptySlotCanBeSuccessWithoutAlgorithm() {
    var profile = PIVCardProfile.yubikey
    profile.emptyMetadataWithoutAlgorithm = true
    let r = send(VirtualPIVCard(state: .factory(serial: 7), profile: profile), [0x00, 0xF7, 0x00, 0x9A])
    #expect(r.sw == 0x9000)
    #expect(!r.data.isEmpty && r.data.first != 0x01)
    // The YubiKey default stays 6A82.
    #expect(send(VirtualPIVCard(state: .factory(serial: 7)), [0x00, 0xF7, 0x00, 0x9A]).sw == 0x6A82)
  }
}
