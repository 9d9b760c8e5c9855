import Platform
import Testing

@testable import TokenDevices

@Suite struct APDUTests {
  @Test func encodesCases() {
    #expect(APDU(ins: 0xFD).encoded() == [0x00, 0xFD, 0x00, 0x00])
    #expect(APDU(ins: 0xF8, le: 0).encoded() == [0x00, 0xF8, 0x00, 0x00, 0x00])
    #expect(APDU(ins: 0x20, p2: 0x80, data: [1, 2]).encoded() == [0x00, 0x20, 0x00, 0x80, 0x02, 1, 2])
    #expect(APDU(ins: 0x87, data: [9], le: 0).encoded() == [0x00, 0x87, 0x00, 0x00, 0x01, 9, 0x00])
  }

  @Test func encodesExtendedOnlyWhenNeeded() {
    let big = [UInt8](repeating: 7, count: 300)
    let e = APDU(ins: 0xDB, data: big, le: 0).encoded(extended: true)
    #expect(Array(e.prefix(7)) == [0x00, 0xDB, 0x00, 0x00, 0x00, 0x01, 0x2C])
    #expect(e.count == 7 + 300 + 2)
    #expect(APDU(ins: 0xFD, le: 0).encoded(extended: true) == [0x00, 0xFD, 0x00, 0x00, 0x00])
  }

  @Test func statusWordRetries() {
    #expect(StatusWord(0x63, 0xC2).retriesLeft == 2)
    #expect(StatusWord(0x63, 0xC0).retriesLeft == 0)
    #expect(StatusWord(0x63, 0x02).retriesLeft == nil)
    #expect(StatusWord(0x90, 0x00).retriesLeft == nil)
    #expect(StatusWord(0x61, 0x10).isMoreDataAvailable)
    #expect(StatusWord(0x6A, 0x82).description == "6A82")
  }

  @Test func responseNeedsStatusWord() throws {
    #expect(throws: SmartCardError.malformedResponse(1)) { try APDUResponse(raw: [0x90]) }
    let r = try APDUResponse(raw: [1, 2, 0x90, 0x00])
    #expect(r.data == [1, 2] && r.statusWord == .success)
  }

  @Test func sensitiveBodiesAreRedactedInTraces() {
    let a = APDU(ins: 0x20, p2: 0x80, data: Array("123456".utf8) + [0xFF, 0xFF], sensitive: true)
    #expect(!a.traceDescription.contains("31 32"))
    #expect(a.traceDescription.contains("redacted 8 bytes"))
  }

  @Test func hexRoundTrip() {
    #expect([UInt8](hex: "01 0a:FF") == [0x01, 0x0A, 0xFF])
    #expect([UInt8](hex: "0") == nil)
    #expect([UInt8](hex: "zz") == nil)
    #expect([0x01, 0xAB].hexString == "01 AB")
  }

  @Test func slotsParse() {
    #expect(PIVSlot(string: "9a") == .authentication)
    #expect(PIVSlot(string: "0x9C") == .signature)
    #expect(PIVSlot(string: "82") == PIVSlot(rawValue: 0x82))
    #expect(PIVSlot(string: "95") == PIVSlot(rawValue: 0x95))
    #expect(PIVSlot(string: "96") == nil)
    #expect(PIVSlot(string: "9b") == nil)
    #expect(PIVSlot(rawValue: 0x95).certificateObject == 0x5FC120)
  }
}

@Suite struct BERTLVTests {
  @Test func roundTripsLengths() {
    for n in [0, 1, 127, 128, 255, 256, 3000] {
      let v = [UInt8](repeating: 0xAB, count: n)
      let enc = BERTLV.encode(0x53, v)
      #expect(BERTLV.find(0x53, in: enc) == v)
    }
  }

  @Test func multiByteTags() {
    let enc = BERTLV.encode(0x7F49, BERTLV.encode(0x86, [4, 1, 2]))
    #expect(enc.prefix(2) == [0x7F, 0x49])
    #expect(BERTLV.find(0x86, in: BERTLV.find(0x7F49, in: enc)!) == [4, 1, 2])
    #expect(BERTLV.encode(0x5FC102, [1]).prefix(3) == [0x5F, 0xC1, 0x02])
  }

  @Test func rejectsTruncatedAndMalformed() {
    #expect(BERTLV.parse([0x53, 0x05, 1, 2]) == nil)  // value shorter than length
    #expect(BERTLV.parse([0x53]) == nil)  // no length
    #expect(BERTLV.parse([0x53, 0x84, 0, 0, 0, 1, 0]) == nil)  // 4-byte length form
    #expect(BERTLV.parse([0x7F]) == nil)  // truncated multi-byte tag
    #expect(BERTLV.parse([0x53, 0x82, 0x01]) == nil)  // truncated long length
    #expect(BERTLV.parse([])?.isEmpty == true)
  }
}

@Suite struct ManagementKeyCipherTests {
  @Test func tripleDESKnownAnswer() {
    // NIST SP 800-67 style check: key = 3 × 0123456789ABCDEF degenerates to single DES;
    // DES(0123456789ABCDEF, "Now is t") = 3FA40E8A984D4815 (FIPS 81 appendix B example).
    let key = [UInt8](hex: "0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF")!
    let out = ManagementKeyCipher.crypt(Array("Now is t".utf8), key: key, algorithm: .tripleDES, encrypt: true)
    #expect(out == [UInt8](hex: "3FA40E8A984D4815"))
  }

  @Test(arguments: [ManagementKeyAlgorithm.tripleDES, .aes128, .aes192, .aes256])
  func roundTrips(_ alg: ManagementKeyAlgorithm) {
    let key = (0..<alg.keyLength).map { UInt8($0 * 7 & 0xFF) }
    let block = (0..<alg.blockSize).map { UInt8($0) }
    let enc = ManagementKeyCipher.crypt(block, key: key, algorithm: alg, encrypt: true)!
    #expect(enc != block)
    #expect(ManagementKeyCipher.crypt(enc, key: key, algorithm: alg, encrypt: false) == block)
  }

  @Test func refusesWrongSizes() {
    #expect(
      ManagementKeyCipher.crypt([0], key: [UInt8](repeating: 0, count: 24), algorithm: .tripleDES, encrypt: true) == nil
    )
    #expect(
      ManagementKeyCipher.crypt([UInt8](repeating: 0, count: 8), key: [0], algorithm: .tripleDES, encrypt: true) == nil)
  }
}

@Suite struct ATRTests {
  let yubiKey5 = [UInt8](hex: "3B FD 13 00 00 81 31 FE 15 80 73 C0 21 C0 57 59 75 62 69 4B 65 79 40")!

  @Test func historicalBytesOfYubiKey5() {
    #expect(ATR(yubiKey5).historicalBytes == [UInt8](hex: "80 73 C0 21 C0 57 59 75 62 69 4B 65 79"))
  }

  @Test func extendedLengthFromCardCapabilities() {
    #expect(ATR(yubiKey5).supportsExtendedLength)
    // Same ATR with the extended-length bit (0x40) cleared in the third capabilities byte (TCK not checked).
    var noExt = yubiKey5
    noExt[13] = 0x80
    #expect(!ATR(noExt).supportsExtendedLength)
    // No card-capabilities object at all (a plain T=1 ATR with one historical byte).
    #expect(!ATR([0x3B, 0x81, 0x80, 0x01, 0x80, 0x80]).supportsExtendedLength)
  }

  @Test func malformedATRs() {
    #expect(ATR([]).historicalBytes == nil)
    #expect(ATR([0x3B, 0xFD, 0x13]).historicalBytes == nil)  // interface bytes cut off
    #expect(!ATR([0x3B, 0x0F, 0x80]).supportsExtendedLength)  // fewer historical bytes than T0 says
  }
}
