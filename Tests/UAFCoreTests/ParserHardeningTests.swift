import Testing
import UAFCore

/// Hostile bytes never trap the core's parsers; entry points that fuzz targets call with raw bytes.
@Suite struct ParserHardeningTests {
  /// SplitMix64: a seeded generator, so a failing case can be replayed.
  struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
      state &+= 0x9E37_79B9_7F4A_7C15
      var z = state
      z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
      z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
      return z ^ (z >> 31)
    }
  }

  @Test func littleEndianReadOfSignedTypesDoesNotTrap() {
    // Int8(0xC8) used to trap (Self(200) overflows); bytes are reinterpreted instead.
    #expect(Int8(littleEndianBytes: [0xC8]) == -56)
    #expect(Int16(littleEndianBytes: [0x00, 0x80]) == Int16.min)
    #expect(Int32(littleEndianBytes: [0xFF, 0xFF, 0xFF, 0xFF]) == -1)
    #expect(UInt32(littleEndianBytes: [1, 0, 0, 0]) == 1)
    #expect(UInt32(littleEndianBytes: [1, 0, 0]) == nil)
  }

  @Test func seededMutationsOfARequestAreTypedErrorsOrValidRequests() {
    let message = Array(
      Msg.json([
        Msg.reg(header: Msg.header("Reg", minor: 0)), Msg.reg(),
      ]).utf8)
    var rng = SplitMix64(state: 0x5EED_0008)
    for _ in 0..<3000 {
      var b = message
      for _ in 0..<Int.random(in: 1...4, using: &rng) {
        b[Int.random(in: 0..<b.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
      }
      if Bool.random(using: &rng) { b = Array(b.prefix(Int.random(in: 0..<b.count, using: &rng))) }
      do {
        let r = try UAFMessageCodec.decodeRequest(bytes: b, expecting: .reg)
        guard case .registration(let reg) = r else {
          Issue.record("expected .reg, got \(r.header.op)")
          continue
        }
        // Whatever passed keeps the bounds.
        #expect((8...64).contains(Base64URL.decode(reg.challenge)?.count ?? -1))
        #expect((1...128).contains(reg.username.utf16.count))
      } catch {
        _ = error  // a typed UAFMessageError: fine
      }
    }
  }

  @Test func seededMutationsOfAssertionsNeverTrap() throws {
    let sample = try #require(Base64URL.decode(ConformanceSampleTests.authAssertion))
    var rng = SplitMix64(state: 0x5EED_0009)
    for _ in 0..<3000 {
      var b = sample
      for _ in 0..<Int.random(in: 1...6, using: &rng) {
        b[Int.random(in: 0..<b.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
      }
      if Bool.random(using: &rng) { b = Array(b.prefix(Int.random(in: 0..<b.count, using: &rng))) }
      _ = try? AuthenticationAssertion(parsing: b)
      _ = try? RegistrationAssertion(parsing: b)
      _ = try? UAFTLV.parse(b)
      _ = UntrustedText.displayable(String(decoding: b, as: UTF8.self))
    }
  }
}
