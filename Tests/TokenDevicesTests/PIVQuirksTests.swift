import Testing

@testable import TokenDevices

/// A card that answers by instruction: what a PIV card without some YubiKey extension says, APDU by APDU.
/// (The session above it is the real one; the same flows run through pcscd against `virtual-token piv
/// --profile generic` in Tests/cli/test_piv_profiles.py.)
final class AnsweringCard: SmartCardTransport {
  var reader = "answering"
  var atr: [UInt8] = [0x3B, 0x88, 0x80, 0x01, 0x50, 0x49, 0x56, 0x63, 0x61, 0x72, 0x64, 0x21, 0x73]
  var resetOnClose = false
  var sent: [[UInt8]] = []
  let answer: ([UInt8]) -> [UInt8]
  init(_ answer: @escaping ([UInt8]) -> [UInt8]) { self.answer = answer }
  func transmit(_ command: [UInt8]) throws(SmartCardError) -> [UInt8] {
    sent.append(command)
    if command[1] == 0xA4 { return [0x90, 0x00] }  // SELECT PIV
    return answer(command)
  }
  func reconnect() throws(SmartCardError) {}
  func beginTransaction() throws(SmartCardError) {}
  func endTransaction() {}
  /// The instructions sent after SELECT, with P2 for GET METADATA and VERIFY ("F7 9A", "20 80").
  var instructions: [String] {
    sent.filter { $0[1] != 0xA4 }.map { c in
      let ins = hex(c[1])
      return [0xF7, 0x20].contains(c[1]) ? "\(ins) \(hex(c[3]))" + (c[1] == 0x20 && c[2] == 0xFF ? " FF" : "") : ins
    }
  }
}

func hex(_ b: UInt8) -> String {
  let s = String(b, radix: 16, uppercase: true)
  return s.count == 1 ? "0" + s : s
}

func sw(_ v: UInt16) -> [UInt8] { [UInt8(v >> 8), UInt8(v & 0xFF)] }

@Suite struct PIVQuirksDerivationTests {
  @Test func nothingAskedDecidesNothing() {
    let q = TokenQuirks.derive(CardAnswers())
    #expect(q.isEmpty)
    #expect(q.mayHaveMetadata)
  }

  @Test func eachQuirkComesFromTheCardsOwnAnswer() {
    var a = CardAnswers()
    a.metadata = .unsupported(.insNotSupported)
    a.verifyReset = .unsupported(.incorrectP1P2)
    a.serial = .unsupported(.insNotSupported)
    a.versionAsked = true
    let q = TokenQuirks.derive(a)
    #expect(q == [.noMetadata, .noVerifyReset])
    #expect(!q.mayHaveMetadata)

    var y = CardAnswers()
    y.version = [5, 2, 7]  // a version number decides nothing else: GET METADATA is judged by its own answer
    y.versionAsked = true
    #expect(TokenQuirks.derive(y) == [.yubicoExtensions])
    y.metadata = .supported
    y.verifyReset = .supported
    y.emptyMetadataWithoutAlgorithm = true
    #expect(TokenQuirks.derive(y) == [.yubicoExtensions, .metadata, .verifyReset, .emptyMetadataWithoutAlgorithm])
  }

  @Test(arguments: [0x6D00, 0x6E00, 0x6A81, 0x6B00] as [UInt16])
  func notImplementedWordsMarkACommandAbsent(word: UInt16) {
    #expect(
      CardAnswers.support(after: StatusWord(rawValue: word), was: .unknown) == .unsupported(StatusWord(rawValue: word)))
  }

  @Test func otherRefusalsLeaveSupportUndecided() {
    // 6982 (security status) says the command exists: not a reason to stop asking.
    #expect(CardAnswers.support(after: .securityStatusNotSatisfied, was: .unknown) == .unknown)
    #expect(CardAnswers.support(after: .success, was: .unknown) == .supported)
  }
}

@Suite struct PIVWithoutYubicoExtensionsTests {
  /// A card of SP 800-73-4 only: Yubico instructions 6D00, PIN with `left` tries, an empty slot said with `empty`.
  static func standardCard(empty: UInt16 = 0x6A88, left: Int = 5, certificate: [UInt8]? = nil) -> AnsweringCard {
    AnsweringCard { c in
      switch c[1] {
      case 0xFD, 0xF8, 0xF7: return sw(0x6D00)
      case 0x20 where c[2] == 0xFF: return sw(0x6A86)  // no VERIFY P1=FF either
      case 0x20: return sw(0x63C0 | UInt16(left))
      case 0x87: return sw(empty)
      case 0xCB:
        if let certificate, c.count > 9, c[7...9] == [0x5F, 0xC1, 0x05] {
          return BERTLV.encode(0x53, BERTLV.encode(0x70, certificate) + BERTLV.encode(0x71, [0])) + sw(0x9000)
        }
        return sw(empty)
      default: return sw(0x6D00)
      }
    }
  }

  @Test func pinTriesComeFromTheEmptyVerifyAndThePUKIsSaidUnknown() throws {
    let card = Self.standardCard(left: 5)
    let s = PIVSession(transport: card)
    #expect(try s.pinStatus(.pin) == PINStatus(kind: .pin, retriesLeft: 5))
    #expect(try s.pinStatus(.puk) == PINStatus(kind: .puk, retriesLeft: nil))
    #expect(s.quirks.contains(.noMetadata))
    // GET METADATA was asked once; refused (6D00), it is not asked again for the PUK.
    #expect(card.instructions.filter { $0.hasPrefix("F7") } == ["F7 80"])
  }

  @Test func aRefusedGetSerialIsNotSentAgainAndTheCHUIDNamesTheCard() throws {
    let card = Self.standardCard()
    let s = PIVSession(transport: card)
    let first = try s.identity(chuid: .whenNoSerial)
    _ = try s.identity(chuid: .whenNoSerial)
    #expect(first.serial == nil && first.version == nil)
    #expect(card.instructions.filter { $0 == "F8" }.count == 1)
    #expect(card.instructions.filter { $0 == "FD" }.count == 1)
    #expect(!s.quirks.contains(.yubicoExtensions))
  }

  @Test(arguments: [0x6A80, 0x6A82, 0x6A86, 0x6A88] as [UInt16])
  func eachEmptySlotWordIsAnEmptySlot(word: UInt16) throws {
    let s = PIVSession(transport: Self.standardCard(empty: word))
    #expect(try s.slotIsOccupied(.authentication) == false)
    #expect(throws: TokenError.slotEmpty(0x9A)) {
      try s.sign(.authentication, digest: [UInt8](repeating: 1, count: 32))
    }
    #expect(try s.readObject(0x5FC10A) == nil)
    #expect(s.answers.emptySlotWord == StatusWord(rawValue: word))
    let found = try s.publicKey(.authentication)
    #expect(found.key == nil && found.slotEmptyIsKnown == false)  // no metadata: empty and certless look alike
  }

  @Test(arguments: [0x6A80, 0x6A82, 0x6A86, 0x6A88] as [UInt16])
  func eachEmptySlotWordFromGetMetadataIsAnEmptySlot(word: UInt16) throws {
    let card = AnsweringCard { c in
      c[1] == 0xF7 ? sw(word) : c[1] == 0xCB ? sw(0x6A82) : sw(0x6D00)
    }
    let s = PIVSession(transport: card)
    #expect(try s.metadata(.authentication) == nil)
    #expect(try s.slotIsOccupied(.authentication) == false)
    #expect(try s.publicKey(.authentication).slotEmptyIsKnown)
    #expect(!s.quirks.contains(.noMetadata))
  }

  @Test func metadataOfAnEmptySlotAnsweredWithSuccessAndNoAlgorithmIsEmpty() throws {
    let card = AnsweringCard { c in
      c[1] == 0xF7 ? BERTLV.encode(0x02, [0, 0]) + sw(0x9000) : c[1] == 0xCB ? sw(0x6A82) : sw(0x6D00)
    }
    let s = PIVSession(transport: card)
    #expect(try s.metadata(.signature) == nil)
    #expect(try s.slotIsOccupied(.signature) == false)
    #expect(s.quirks.contains(.emptyMetadataWithoutAlgorithm))
  }

  @Test func pinMetadataWithoutTriesFallsBackToVerify() throws {
    let card = AnsweringCard { c in
      switch c[1] {
      case 0xF7: return BERTLV.encode(0x01, [0xFF]) + sw(0x9000)  // no tag 06
      case 0x20: return sw(0x63C8)
      default: return sw(0x6D00)
      }
    }
    #expect(try PIVSession(transport: card).pinStatus(.pin) == PINStatus(kind: .pin, retriesLeft: 8))
  }

  @Test func aVerifiedPINOnACardWithoutVerifyResetStaysVerified() throws {
    let card = AnsweringCard { c in
      switch c[1] {
      case 0x20 where c[2] == 0xFF: return sw(0x6A86)
      case 0x20: return sw(0x9000)
      default: return sw(0x6D00)
      }
    }
    let s = PIVSession(transport: card)
    #expect(try s.pinStatus(.pin).isVerified)
    #expect(s.quirks.contains(.noVerifyReset))
  }

  @Test func withoutMetadataTheManagementKeyIs3DES() throws {
    let card = Self.standardCard()
    let s = PIVSession(transport: card)
    #expect(try s.managementKeyAlgorithm() == .tripleDES)
    #expect(try s.managementKeyAlgorithm() == .tripleDES)
    #expect(card.instructions == ["F7 9B"])
  }

  @Test func thePublicKeyComesFromTheSlotsCertificate() throws {
    let point: [UInt8] = [0x04] + [UInt8](repeating: 0xAB, count: 64)
    let card = Self.standardCard(certificate: Self.certificate(point: point))
    let found = try PIVSession(transport: card).publicKey(.authentication)
    #expect(found.key == point && found.source == .certificate)
  }

  /// A certificate's shape (RFC 5280 §4.1) around an EC public key; the parser reads no other field.
  static func certificate(point: [UInt8]) -> [UInt8] {
    func seq(_ b: [UInt8]) -> [UInt8] { BERTLV.encode(0x30, b) }
    let oid =
      BERTLV.encode(0x06, X509PublicKey.idECPublicKey) + BERTLV.encode(0x06, [0x2A, 0x86, 0x48, 0xCE, 0x3D, 3, 1, 7])
    let spki = seq(seq(oid) + BERTLV.encode(0x03, [0] + point))
    let name = seq([])
    let tbs = seq(
      BERTLV.encode(0xA0, BERTLV.encode(0x02, [2])) + BERTLV.encode(0x02, [1]) + seq([]) + name + seq([]) + name
        + spki)
    return seq(tbs + seq([]) + BERTLV.encode(0x03, [0]))
  }
}
