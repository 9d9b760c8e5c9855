import CLibCrypto

/// One-block ECB encryption for 9B challenge-response (SP 800-73-4 Part 2 Appendix A.1, via libcrypto).
enum ManagementKeyCipher {
  /// Loads libcrypto (at the first management-key authentication, not at start-up); call before `crypt`/`random`.
  static func loadLibrary() throws(TokenError) {
    do { try SystemLibrary.crypto.load() } catch { throw .libraryMissing(error) }
  }

  static func crypt(_ block: [UInt8], key: [UInt8], algorithm: ManagementKeyAlgorithm, encrypt: Bool) -> [UInt8]? {
    guard key.count == algorithm.keyLength, block.count == algorithm.blockSize,
      let ctx = EVP_CIPHER_CTX_new()
    else { return nil }
    defer { EVP_CIPHER_CTX_free(ctx) }
    let cipher: OpaquePointer? =
      switch algorithm {
      case .tripleDES: EVP_des_ede3_ecb()
      case .aes128: EVP_aes_128_ecb()
      case .aes192: EVP_aes_192_ecb()
      case .aes256: EVP_aes_256_ecb()
      }
    guard EVP_CipherInit_ex(ctx, cipher, nil, key, nil, encrypt ? 1 : 0) == 1 else { return nil }
    EVP_CIPHER_CTX_set_padding(ctx, 0)
    var out = [UInt8](repeating: 0, count: block.count + algorithm.blockSize)
    var len: Int32 = 0
    guard EVP_CipherUpdate(ctx, &out, &len, block, Int32(block.count)) == 1 else { return nil }
    return Array(out.prefix(Int(len)))
  }

  static func random(_ n: Int) -> [UInt8] {
    var out = [UInt8](repeating: 0, count: n)
    _ = RAND_bytes(&out, Int32(n))
    return out
  }
}
