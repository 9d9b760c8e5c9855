import CLibCrypto
import Crypto

/// CBOR for the requests TokenBridge sends itself (CTAP 2.1 §8: the CTAP2 canonical form — definite lengths, the
/// shortest heads, map keys sorted by their encoded bytes, shorter first). Responses are read with
/// `FIDO2GetInfo.Reader`; the simulators' codec is not shared with the client.
enum CTAP2CBOR {
  typealias Item = FIDO2GetInfo.Item

  static func encode(_ item: Item) -> [UInt8] {
    var out: [UInt8] = []
    write(item, into: &out)
    return out
  }

  static func head(_ major: UInt8, _ value: UInt64, into out: inout [UInt8]) {
    let m = major << 5
    switch value {
    case 0..<24: out.append(m | UInt8(value))
    case 24...0xFF: out += [m | 24, UInt8(value)]
    case 0x100...0xFFFF: out += [m | 25, UInt8(value >> 8), UInt8(value & 0xFF)]
    case 0x1_0000...0xFFFF_FFFF: out += [m | 26] + (0..<4).reversed().map { UInt8((value >> ($0 * 8)) & 0xFF) }
    default: out += [m | 27] + (0..<8).reversed().map { UInt8((value >> ($0 * 8)) & 0xFF) }
    }
  }

  static func write(_ item: Item, into out: inout [UInt8]) {
    switch item {
    case .unsigned(let u): head(0, u, into: &out)
    case .negative(let n): head(1, n, into: &out)
    case .bytes(let b):
      head(2, UInt64(b.count), into: &out)
      out += b
    case .text(let s):
      head(3, UInt64(s.utf8.count), into: &out)
      out += s.utf8
    case .array(let items):
      head(4, UInt64(items.count), into: &out)
      for i in items { write(i, into: &out) }
    case .map(let pairs):
      head(5, UInt64(pairs.count), into: &out)
      let encoded = pairs.map { (encode($0.0), $0.1) }.sorted { a, b in
        a.0.count != b.0.count ? a.0.count < b.0.count : a.0.lexicographicallyPrecedes(b.0)
      }
      for (key, value) in encoded {
        out += key
        write(value, into: &out)
      }
    case .bool(let b): out.append(b ? 0xF5 : 0xF4)
    case .other: out.append(0xF6)  // null
    }
  }

  /// A negative integer `-1 - n` as CBOR stores it (COSE labels −1, −2, −3: n = 0, 1, 2).
  static func int(_ v: Int) -> Item { v >= 0 ? .unsigned(UInt64(v)) : .negative(UInt64(-1 - v)) }

  /// The value under `key` (an integer) in a map item.
  static func field(_ map: [(Item, Item)], _ key: Int) -> Item? { map.first { $0.0 == int(key) }?.1 }

  /// getPINRetries' powerCycleState (0x04, CTAP 2.1): true while the key takes no PIN until it is re-inserted (3
  /// wrong in a row, in this process or another); nil when the key leaves it out (CTAP 2.0 keys say nothing).
  static func powerCycleState(_ map: [(Item, Item)]) -> Bool? {
    if case .bool(let b)? = field(map, 4) { return b }
    return nil
  }

  /// One well-formed CBOR map and nothing after it; nil otherwise.
  static func map(_ bytes: [UInt8]) -> [(Item, Item)]? {
    var reader = FIDO2GetInfo.Reader(bytes: bytes)
    guard let item = try? reader.item(depth: 0), reader.offset == bytes.count, case .map(let m) = item else {
      return nil
    }
    return m
  }
}

/// The client side of a PIN/UV auth protocol (CTAP 2.1 §6.5.6 protocol 1, §6.5.7 protocol 2): the ECDH with the
/// key's key-agreement key, and encrypt / decrypt / authenticate under the shared secret. The simulators have
/// their own (VirtualTokens); this one is the client's, checked against them and, in the lab, a real kernel's
/// hidraw path (HardwareNotes.md, "PIN protocol of our own").
struct CTAP2PinProtocol {
  let version: Int
  /// The platform's key-agreement public key, as the COSE_Key a request carries (keyAgreement, 3).
  let platformKey: FIDO2GetInfo.Item
  /// Protocol 1: SHA-256(Z), 32 bytes. Protocol 2: HMAC key (32) ‖ AES key (32). Wiped by `wipe()`.
  private(set) var shared: [UInt8]

  /// Runs the ECDH with the key's COSE_Key (getKeyAgreement's 1: `{1: 2, 3: -25, -1: 1, -2: x, -3: y}`); nil when
  /// that is not a P-256 point.
  init?(version: Int, authenticatorKey: FIDO2GetInfo.Item) {
    guard version == 1 || version == 2, case .map(let cose) = authenticatorKey,
      CTAP2CBOR.field(cose, 1) == .unsigned(2), CTAP2CBOR.field(cose, -1) == .unsigned(1),
      case .bytes(let x)? = CTAP2CBOR.field(cose, -2), case .bytes(let y)? = CTAP2CBOR.field(cose, -3),
      x.count == 32, y.count == 32,
      let theirs = try? P256.KeyAgreement.PublicKey(x963Representation: [0x04] + x + y)
    else { return nil }
    let ours = P256.KeyAgreement.PrivateKey()
    guard let z = try? ours.sharedSecretFromKeyAgreement(with: theirs) else { return nil }
    let point = Array(ours.publicKey.x963Representation)  // 04 ‖ x ‖ y
    self.version = version
    platformKey = .map([
      (CTAP2CBOR.int(1), .unsigned(2)), (CTAP2CBOR.int(3), CTAP2CBOR.int(-25)), (CTAP2CBOR.int(-1), .unsigned(1)),
      (CTAP2CBOR.int(-2), .bytes(Array(point[1..<33]))), (CTAP2CBOR.int(-3), .bytes(Array(point[33..<65]))),
    ])
    if version == 1 {
      shared = z.withUnsafeBytes { Array(SHA256.hash(data: $0)) }
    } else {
      let ikm = z.withUnsafeBytes { SymmetricKey(data: $0) }
      func derive(_ info: String) -> [UInt8] {
        HKDF<SHA256>.deriveKey(
          inputKeyMaterial: ikm, salt: [UInt8](repeating: 0, count: 32), info: Array(info.utf8), outputByteCount: 32
        ).withUnsafeBytes { Array($0) }
      }
      shared = derive("CTAP2 HMAC key") + derive("CTAP2 AES key")
    }
  }

  mutating func wipe() { TokenDevices.wipe(&shared) }

  var aesKey: [UInt8] { version == 1 ? shared : Array(shared[32..<64]) }
  var hmacKey: [UInt8] { version == 1 ? shared : Array(shared[0..<32]) }

  /// AES-256-CBC without padding (`plaintext` a multiple of 16): protocol 1 with a zero IV, protocol 2 with a
  /// random IV written first.
  func encrypt(_ plaintext: [UInt8]) -> [UInt8]? {
    let iv = version == 1 ? [UInt8](repeating: 0, count: 16) : random(16)
    guard let c = Self.cbc(plaintext, key: aesKey, iv: iv, encrypt: true) else { return nil }
    return version == 1 ? c : iv + c
  }

  func decrypt(_ ciphertext: [UInt8]) -> [UInt8]? {
    if version == 1 { return Self.cbc(ciphertext, key: aesKey, iv: [UInt8](repeating: 0, count: 16), encrypt: false) }
    guard ciphertext.count >= 16 else { return nil }
    return Self.cbc(Array(ciphertext.dropFirst(16)), key: aesKey, iv: Array(ciphertext.prefix(16)), encrypt: false)
  }

  /// authenticate(shared secret, message).
  func authenticate(_ message: [UInt8]) -> [UInt8] { Self.authenticate(version: version, key: hmacKey, message) }

  /// HMAC-SHA-256: protocol 1 keeps its first 16 bytes, protocol 2 all 32.
  static func authenticate(version: Int, key: [UInt8], _ message: [UInt8]) -> [UInt8] {
    let mac = Array(HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: key)))
    return version == 1 ? Array(mac.prefix(16)) : mac
  }

  func random(_ n: Int) -> [UInt8] {
    var g = SystemRandomNumberGenerator()
    return (0..<n).map { _ in UInt8.random(in: 0...255, using: &g) }
  }

  static func cbc(_ input: [UInt8], key: [UInt8], iv: [UInt8], encrypt: Bool) -> [UInt8]? {
    guard input.count % 16 == 0, key.count == 32, iv.count == 16, (try? EVPCipher.loadLibrary()) != nil else {
      return nil
    }
    return EVPCipher.run(EVP_aes_256_cbc(), key: key, iv: iv, input, encrypt: encrypt)
  }
}
