import CLibCrypto

/// One-block ECB encryption for 9B challenge-response (SP 800-73-4 Part 2 Appendix A.1, via libcrypto).
enum ManagementKeyCipher {
  /// Loads libcrypto (at the first management-key authentication, not at start-up); call before `crypt`/`random`.
  static func loadLibrary() throws(TokenError) { try EVPCipher.loadLibrary() }

  static func crypt(_ block: [UInt8], key: [UInt8], algorithm: ManagementKeyAlgorithm, encrypt: Bool) -> [UInt8]? {
    guard key.count == algorithm.keyLength, block.count == algorithm.blockSize else { return nil }
    let cipher: OpaquePointer? =
      switch algorithm {
      case .tripleDES: EVP_des_ede3_ecb()
      case .aes128: EVP_aes_128_ecb()
      case .aes192: EVP_aes_192_ecb()
      case .aes256: EVP_aes_256_ecb()
      }
    return EVPCipher.run(cipher, key: key, iv: nil, block, encrypt: encrypt)
  }

  static func random(_ n: Int) -> [UInt8] {
    var out = [UInt8](repeating: 0, count: n)
    _ = RAND_bytes(&out, Int32(n))
    return out
  }
}
