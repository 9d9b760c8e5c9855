import Testing

@testable import VirtualTokens

@Suite struct CBORTests {
  @Test func encodesCanonically() {
    // Keys: unsigned ascending, then negative, then text by length then bytes (CTAP 2.1 §8).
    let m = CBOR.map(
      (.text("up"), .bool(true)), (.int(-1), .int(1)), (.int(3), .int(-25)), (.text("rk"), .null), (.int(1), .int(2)))
    #expect(
      m.encoded() == [0xA5, 0x01, 0x02, 0x03, 0x38, 0x18, 0x20, 0x01, 0x62, 0x72, 0x6B, 0xF6, 0x62, 0x75, 0x70, 0xF5])
    #expect(CBOR.int(1000).encoded() == [0x19, 0x03, 0xE8])
    #expect(CBOR.bytes([1, 2]).encoded() == [0x42, 1, 2])
  }

  @Test func roundTrips() throws {
    let v = CBOR.map(
      (.int(1), .array([.text("FIDO_2_1"), .bytes([UInt8](repeating: 9, count: 300))])),
      (.int(2), .int(-70000)), (.text("x"), .unsigned(UInt64.max)))
    #expect(try CBOR.decode(v.encoded()) == CBOR.decode(v.encoded()))
    #expect(try CBOR.decode(v.encoded()).encoded() == v.encoded())
  }

  @Test func refusesMalformedInput() {
    #expect(throws: CBOR.DecodeError.truncated) { try CBOR.decode([0x42, 1]) }
    #expect(throws: CBOR.DecodeError.trailingBytes) { try CBOR.decode([0x01, 0x02]) }
    #expect(throws: CBOR.DecodeError.unsupported(0x9F)) { try CBOR.decode([0x9F]) }  // indefinite length
    #expect(throws: CBOR.DecodeError.tooDeep) { try CBOR.decode([UInt8](repeating: 0x81, count: 40) + [0]) }
    #expect(throws: CBOR.DecodeError.truncated) {
      try CBOR.decode([0x9B, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF])
    }
    #expect(throws: CBOR.DecodeError.invalidText) { try CBOR.decode([0x62, 0xFF, 0xFE]) }
  }
}
