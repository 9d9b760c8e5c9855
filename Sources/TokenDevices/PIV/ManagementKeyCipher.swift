import CLibCrypto
import Platform

/// One-block ECB encryption for 9B challenge-response (SP 800-73-4 Part 2 Appendix A.1, via libcrypto).
enum ManagementKeyCipher {
  /// Loads libcrypto (at the first management-key authentication, not at start-up); call before `crypt`/`random`.
  static func loadLibrary() throws(TokenError) {
    do { try SystemLibrary.crypto.load() } catch { throw .libraryMissing(error) }
  }

  static func crypt(_ block: [UInt8], key: [UInt8], algorithm: ManagementKeyAlgorithm, encrypt: Bool) -> [UInt8]? {
    guard key.count == algorithm.keyLength, block.count == algorithm.blockSize else { return nil }
    let cipher: OpaquePointer? =
      switch algorithm {
      case .tripleDES: EVP_des_ede3_ecb()
      case .aes128: EVP_aes_128_ecb()
      case .aes192: EVP_aes_192_ecb()
      case .aes256: EVP_aes_256_ecb()
      }
    return run(cipher, key: key, block, encrypt: encrypt)
  }

  static func random(_ n: Int) -> [UInt8] {
    var out = [UInt8](repeating: 0, count: n)
    _ = RAND_bytes(&out, Int32(n))
    return out
  }

  /// `input` (whole blocks) through the ECB `cipher` with `key`, without padding; nil when libcrypto refuses. The
  /// scratch buffer is wiped: what passes through may be a secret (a decrypted witness).
  private static func run(_ cipher: OpaquePointer?, key: [UInt8], _ input: [UInt8], encrypt: Bool) -> [UInt8]? {
    guard let ctx = EVP_CIPHER_CTX_new() else { return nil }
    defer { EVP_CIPHER_CTX_free(ctx) }
    guard EVP_CipherInit_ex(ctx, cipher, nil, key, nil, encrypt ? 1 : 0) == 1 else { return nil }
    EVP_CIPHER_CTX_set_padding(ctx, 0)
    var out = [UInt8](repeating: 0, count: input.count + 32)
    defer { wipe(&out) }
    var len: Int32 = 0
    guard input.isEmpty || EVP_CipherUpdate(ctx, &out, &len, input, Int32(input.count)) == 1 else { return nil }
    return Array(out.prefix(Int(len)))
  }
}
