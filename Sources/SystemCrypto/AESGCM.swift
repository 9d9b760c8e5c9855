import CSystemCrypto
import FoundationEssentials

/// AES (FIPS 197).
public enum AES {
  /// AES in Galois/Counter Mode (SP 800-38D) with a 16-byte tag.
  public enum GCM {
    /// A nonce (IV): 12 random bytes by default.
    public struct Nonce: Sendable, Sequence {
      let bytes: [UInt8]
      public init() { bytes = randomBytes(12) }
      /// At least 12 bytes (SP 800-38D §5.2.1.1 allows other lengths; 12 is the one interoperable choice).
      public init<D: DataProtocol>(data: D) throws(CryptoError) {
        guard data.count >= 12 else { throw .incorrectParameterSize }
        bytes = Array(data)
      }
      public func makeIterator() -> IndexingIterator<[UInt8]> { bytes.makeIterator() }
    }

    public struct SealedBox: Sendable {
      public let nonce: Nonce
      public let ciphertext: Data
      public let tag: Data

      public init<C: DataProtocol, T: DataProtocol>(nonce: Nonce, ciphertext: C, tag: T) throws(CryptoError) {
        guard tag.count == 16 else { throw .incorrectParameterSize }
        self.nonce = nonce
        self.ciphertext = Data(ciphertext)
        self.tag = Data(tag)
      }
    }

    public static func seal<P: DataProtocol, A: DataProtocol>(
      _ message: P, using key: SymmetricKey, nonce: Nonce = Nonce(), authenticating aad: A
    ) throws(CryptoError) -> SealedBox {
      let plain = Array(message)
      let aad = Array(aad)
      var out = [UInt8](repeating: 0, count: plain.count)
      var tag = [UInt8](repeating: 0, count: 16)
      try crypt(true, key, nonce, aad, plain, &out, &tag)
      return try SealedBox(nonce: nonce, ciphertext: out, tag: tag)
    }

    /// The plaintext; `.authenticationFailure` when the tag does not authenticate the ciphertext and `aad`.
    public static func open<A: DataProtocol>(_ box: SealedBox, using key: SymmetricKey, authenticating aad: A)
      throws(CryptoError) -> Data
    {
      let cipher = Array(box.ciphertext)
      var out = [UInt8](repeating: 0, count: cipher.count)
      var tag = Array(box.tag)
      try crypt(false, key, box.nonce, Array(aad), cipher, &out, &tag)
      return Data(out)
    }

    static func crypt(
      _ encrypt: Bool, _ key: SymmetricKey, _ nonce: Nonce, _ aad: [UInt8], _ input: [UInt8], _ out: inout [UInt8],
      _ tag: inout [UInt8]
    ) throws(CryptoError) {
      guard [128, 192, 256].contains(key.bitCount) else { throw .incorrectKeySize }
      let status = key.withUnsafeBytes { k in
        tbc_aes_gcm(
          encrypt ? 1 : 0, bytes(k), k.count, nonce.bytes, nonce.bytes.count, aad, aad.count, input, input.count, &out,
          &tag)
      }
      try check(status, invalid: .authenticationFailure)
    }
  }
}
