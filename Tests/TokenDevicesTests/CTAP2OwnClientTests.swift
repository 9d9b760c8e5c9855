import Crypto
import Testing

@testable import TokenDevices

/// The pieces of TokenBridge's own CTAP2 client that need no key: the canonical CBOR it sends, the PIN protocols'
/// shared secrets and ciphers, and the reader of the assertion's authenticator data (hostile input: every
/// truncation is refused, never a trap). The whole exchange is checked against python-fido2 in
/// Tests/cli/test_own_ctap.py.
struct CTAP2OwnClientTests {
  typealias Item = FIDO2GetInfo.Item

  @Test func mapsAreCanonicalShorterKeysFirstThenBytewise() {
    let cose: Item = .map([
      (CTAP2CBOR.int(-3), .unsigned(0)), (CTAP2CBOR.int(-1), .unsigned(1)), (CTAP2CBOR.int(3), CTAP2CBOR.int(-25)),
      (CTAP2CBOR.int(1), .unsigned(2)), (CTAP2CBOR.int(-2), .unsigned(0)),
    ])
    #expect(CTAP2CBOR.encode(cose) == [0xA5, 0x01, 0x02, 0x03, 0x38, 0x18, 0x20, 0x01, 0x21, 0x00, 0x22, 0x00])
    // "id" (2 bytes) before "type" (4), as CTAP 2.1 §8 orders text keys.
    let descriptor: Item = .map([(.text("type"), .text("public-key")), (.text("id"), .bytes([1]))])
    #expect(CTAP2CBOR.encode(descriptor).prefix(5) == [0xA2, 0x62, 0x69, 0x64, 0x41])
  }

  @Test(arguments: [(UInt64(23), 1), (24, 2), (255, 2), (256, 3), (65_535, 3), (65_536, 5), (1 << 32, 9)])
  func headsAreTheShortest(value: UInt64, length: Int) {
    let encoded = CTAP2CBOR.encode(.unsigned(value))
    #expect(encoded.count == length)
    var reader = FIDO2GetInfo.Reader(bytes: encoded)
    #expect((try? reader.item(depth: 0)) == .unsigned(value))
  }

  @Test func whatIsEncodedReadsBack() throws {
    let request: Item = .map([
      (CTAP2CBOR.int(1), .text("tokenbridge.uaf")), (CTAP2CBOR.int(2), .bytes([UInt8](repeating: 7, count: 300))),
      (CTAP2CBOR.int(5), .map([(.text("up"), .bool(true))])), (CTAP2CBOR.int(-7), .array([.bool(false), .other])),
    ])
    let map = try #require(CTAP2CBOR.map(CTAP2CBOR.encode(request)))
    #expect(CTAP2CBOR.field(map, 1) == .text("tokenbridge.uaf"))
    #expect(CTAP2CBOR.field(map, 2) == .bytes([UInt8](repeating: 7, count: 300)))
    #expect(map.count == 4)
  }

  /// P-256's generator as the key's COSE_Key: Z = our scalar × G is then the x-coordinate of our own public key,
  /// which the request carries, so the shared secret is known without the key's private half.
  static let generator: Item = .map([
    (CTAP2CBOR.int(1), .unsigned(2)), (CTAP2CBOR.int(3), CTAP2CBOR.int(-25)), (CTAP2CBOR.int(-1), .unsigned(1)),
    (CTAP2CBOR.int(-2), .bytes(hex("6B17D1F2E12C4247F8BCE6E563A440F277037D812DEB33A0F4A13945D898C296"))),
    (CTAP2CBOR.int(-3), .bytes(hex("4FE342E2FE1A7F9B8EE7EB4A7C0F9E162BCE33576B315ECECBB6406837BF51F5"))),
  ])

  static func hex(_ s: String) -> [UInt8] {
    stride(from: 0, to: s.count, by: 2).map {
      UInt8(s[s.index(s.startIndex, offsetBy: $0)..<s.index(s.startIndex, offsetBy: $0 + 2)], radix: 16)!
    }
  }

  static func z(_ p: CTAP2PinProtocol) throws -> [UInt8] {
    guard case .map(let cose) = p.platformKey, case .bytes(let x)? = CTAP2CBOR.field(cose, -2) else {
      throw Malformed()
    }
    return x
  }
  struct Malformed: Error {}

  @Test func protocolOneIsSHA256OfZWithAZeroIVAnd16ByteMACs() throws {
    let p = try #require(CTAP2PinProtocol(version: 1, authenticatorKey: Self.generator))
    #expect(p.shared == Array(SHA256.hash(data: try Self.z(p))))
    let plain = [UInt8](repeating: 0x41, count: 32)
    let c = try #require(p.encrypt(plain))
    #expect(c.count == 32 && p.encrypt(plain) == c)  // no IV: the same plaintext gives the same ciphertext
    #expect(p.decrypt(c) == plain)
    #expect(p.authenticate([1, 2, 3]).count == 16)
    #expect(p.encrypt([1, 2, 3]) == nil)  // not a multiple of the block size
  }

  @Test func protocolTwoIsHKDFWithARandomIVAndFullMACs() throws {
    let p = try #require(CTAP2PinProtocol(version: 2, authenticatorKey: Self.generator))
    let ikm = SymmetricKey(data: try Self.z(p))
    let salt = [UInt8](repeating: 0, count: 32)
    func derive(_ info: String) -> [UInt8] {
      HKDF<SHA256>.deriveKey(inputKeyMaterial: ikm, salt: salt, info: Array(info.utf8), outputByteCount: 32)
        .withUnsafeBytes { Array($0) }
    }
    #expect(p.hmacKey == derive("CTAP2 HMAC key") && p.aesKey == derive("CTAP2 AES key"))
    let plain = [UInt8](repeating: 0x42, count: 64)
    let c = try #require(p.encrypt(plain))
    #expect(c.count == 80 && p.encrypt(plain) != c)  // IV ‖ ciphertext, a new IV each time
    #expect(p.decrypt(c) == plain)
    #expect(p.decrypt(Array(c.prefix(15))) == nil)
    #expect(p.authenticate([1, 2, 3]).count == 32)
  }

  @Test func aKeyThatIsNotAP256PointIsRefused() {
    guard case .map(var cose) = Self.generator else { return }
    cose[4] = (CTAP2CBOR.int(-3), .bytes([UInt8](repeating: 1, count: 32)))  // off the curve
    #expect(CTAP2PinProtocol(version: 2, authenticatorKey: .map(cose)) == nil)
    #expect(CTAP2PinProtocol(version: 3, authenticatorKey: Self.generator) == nil)
    #expect(CTAP2PinProtocol(version: 1, authenticatorKey: .bytes([])) == nil)
  }

  /// rpIdHash, flags (UP, UV, ED), counter, then {"hmac-secret": 48 bytes}.
  static let authData: [UInt8] =
    [UInt8](repeating: 0xAA, count: 32) + [0x85, 0, 0, 0, 9]
    + CTAP2CBOR.encode(.map([(.text("hmac-secret"), .bytes([UInt8](repeating: 5, count: 48)))]))

  @Test func theHmacSecretOutputIsReadAndEveryTruncationRefused() {
    #expect(FIDO2Session.hmacSecretOutput(Self.authData) == [UInt8](repeating: 5, count: 48))
    for n in 0..<Self.authData.count {
      #expect(FIDO2Session.hmacSecretOutput(Array(Self.authData.prefix(n))) == nil)
    }
    var noExtensions = Self.authData
    noExtensions[32] = 0x05  // ED clear
    #expect(FIDO2Session.hmacSecretOutput(noExtensions) == nil)
  }

  @Test func attestedCredentialDataIsSkippedAndABadLengthRefused() {
    let cose = CTAP2CBOR.encode(Self.generator)
    let attested = [UInt8](repeating: 0, count: 16) + [0, 3, 1, 2, 3] + cose
    var data = Array(Self.authData.prefix(37)) + attested + Array(Self.authData.dropFirst(37))
    data[32] = 0xC5  // AT and ED
    #expect(FIDO2Session.hmacSecretOutput(data) == [UInt8](repeating: 5, count: 48))
    data[37 + 17] = 0xFF  // a credential ID running past the data
    #expect(FIDO2Session.hmacSecretOutput(data) == nil)
  }
}
