import CLibCrypto
import SystemCrypto
import Foundation

/// PIN/UV auth protocols 1 and 2 (CTAP 2.1 §6.5.6, §6.5.7), authenticator side.
struct PinProtocol {
  let version: Int

  /// Shared secret from the platform's key-agreement key: protocol 1 SHA-256(Z.x); protocol 2 the two HKDF keys.
  func sharedSecret(_ own: P256.KeyAgreement.PrivateKey, peer: CBOR) -> [UInt8]? {
    guard peer[int: 1]?.int == 2, peer[int: -1]?.int == 1, let x = peer[int: -2]?.bytes, let y = peer[int: -3]?.bytes,
      x.count == 32, y.count == 32,
      let pub = try? P256.KeyAgreement.PublicKey(x963Representation: [0x04] + x + y),
      let z = try? own.sharedSecretFromKeyAgreement(with: pub)
    else { return nil }
    let zBytes = z.withUnsafeBytes { Array($0) }
    if version == 1 { return Array(SHA256.hash(data: zBytes)) }
    let salt = [UInt8](repeating: 0, count: 32)
    let hmacKey = HKDF<SHA256>.deriveKey(
      inputKeyMaterial: SymmetricKey(data: zBytes), salt: salt, info: Array("CTAP2 HMAC key".utf8), outputByteCount: 32)
    let aesKey = HKDF<SHA256>.deriveKey(
      inputKeyMaterial: SymmetricKey(data: zBytes), salt: salt, info: Array("CTAP2 AES key".utf8), outputByteCount: 32)
    return hmacKey.withUnsafeBytes { Array($0) } + aesKey.withUnsafeBytes { Array($0) }
  }

  func encrypt(_ key: [UInt8], _ plaintext: [UInt8]) -> [UInt8]? {
    if version == 1 { return aesCBC(key, iv: [UInt8](repeating: 0, count: 16), plaintext, encrypt: true) }
    let iv = randomBytes(16)
    return aesCBC(Array(key[32..<64]), iv: iv, plaintext, encrypt: true).map { iv + $0 }
  }

  func decrypt(_ key: [UInt8], _ ciphertext: [UInt8]) -> [UInt8]? {
    if version == 1 { return aesCBC(key, iv: [UInt8](repeating: 0, count: 16), ciphertext, encrypt: false) }
    guard ciphertext.count >= 32 else { return nil }
    return aesCBC(Array(key[32..<64]), iv: Array(ciphertext[0..<16]), Array(ciphertext[16...]), encrypt: false)
  }

  /// authenticate(key, message): protocol 1 the first 16 bytes of HMAC-SHA-256, protocol 2 all 32.
  /// `key` is the shared secret (protocol 2: its first half is the HMAC key) or a pinUvAuthToken.
  func authenticate(_ key: [UInt8], _ message: [UInt8], isToken: Bool = false) -> [UInt8] {
    let k = version == 2 && !isToken ? Array(key[0..<32]) : key
    let mac = Array(HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: k)))
    return version == 1 ? Array(mac.prefix(16)) : mac
  }

  func verify(_ key: [UInt8], _ message: [UInt8], _ param: [UInt8], isToken: Bool = false) -> Bool {
    let expected = authenticate(key, message, isToken: isToken)
    return param.count == expected.count && constantTimeEqual(param, expected)
  }

  func aesCBC(_ key: [UInt8], iv: [UInt8], _ input: [UInt8], encrypt: Bool) -> [UInt8]? {
    guard key.count == 32, input.count % 16 == 0, let ctx = EVP_CIPHER_CTX_new() else { return nil }
    defer { EVP_CIPHER_CTX_free(ctx) }
    guard EVP_CipherInit_ex(ctx, EVP_aes_256_cbc(), nil, key, iv, encrypt ? 1 : 0) == 1 else { return nil }
    EVP_CIPHER_CTX_set_padding(ctx, 0)
    if input.isEmpty { return [] }
    var out = [UInt8](repeating: 0, count: input.count + 16)
    var len: Int32 = 0
    guard EVP_CipherUpdate(ctx, &out, &len, input, Int32(input.count)) == 1 else { return nil }
    return Array(out.prefix(Int(len)))
  }
}

/// The COSE_Key of a P-256 public key (`alg` -25 for key agreement, -7 for ES256 credentials).
func coseKey(_ x963: Data, alg: Int) -> CBOR {
  let b = Array(x963)
  return .map(
    (.int(1), .int(2)), (.int(3), .int(alg)), (.int(-1), .int(1)), (.int(-2), .bytes(Array(b[1..<33]))),
    (.int(-3), .bytes(Array(b[33..<65]))))
}
