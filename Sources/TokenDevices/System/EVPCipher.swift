import CLibCrypto

/// One pass of a libcrypto EVP cipher without padding (the input a whole number of blocks): PIV's management-key
/// challenge (`ManagementKeyCipher`, ECB) and CTAP2's PIN protocols (`CTAP2PinProtocol`, AES-256-CBC).
enum EVPCipher {
  /// Loads libcrypto (at the first use, not at start-up); call before `run`.
  static func loadLibrary() throws(TokenError) {
    do { try SystemLibrary.crypto.load() } catch { throw .libraryMissing(error) }
  }

  /// `input` through `cipher` with `key` (and `iv` for a chained mode); nil when libcrypto refuses. The scratch
  /// buffer is wiped: what passes through may be a secret (a PIN token, an hmac-secret output).
  static func run(_ cipher: OpaquePointer?, key: [UInt8], iv: [UInt8]?, _ input: [UInt8], encrypt: Bool) -> [UInt8]? {
    guard let ctx = EVP_CIPHER_CTX_new() else { return nil }
    defer { EVP_CIPHER_CTX_free(ctx) }
    guard EVP_CipherInit_ex(ctx, cipher, nil, key, iv, encrypt ? 1 : 0) == 1 else { return nil }
    EVP_CIPHER_CTX_set_padding(ctx, 0)
    var out = [UInt8](repeating: 0, count: input.count + 32)
    defer { wipe(&out) }
    var len: Int32 = 0
    guard input.isEmpty || EVP_CipherUpdate(ctx, &out, &len, input, Int32(input.count)) == 1 else { return nil }
    return Array(out.prefix(Int(len)))
  }
}
