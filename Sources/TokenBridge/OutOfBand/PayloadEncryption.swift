import SystemCrypto
import FoundationEssentials
import Platform
import TokenDevices
import UAFCore

/// Encrypted out-of-band payloads (`nma_data_content_type: application/jose`). The contract leaves the JWE
/// algorithms open (backend contract, open question 3); this file holds the project's choice, and nothing else
/// depends on it:
/// - `nma_data` is a compact-serialized JWE string (five base64url parts; no encrypted key, as for ECDH-ES);
/// - `alg` = `ECDH-ES` (direct key agreement) with the device's P-256 encryption key (`DeviceKeys.encryption`,
///   whose public JWK every dispatch target of this device carries as `encryptionKey`), `epk` the sender's
///   ephemeral P-256 key; the content key is the Concat KDF (RFC 7518 §4.6.2, SHA-256) of the shared secret with
///   AlgorithmID = `enc`, PartyUInfo = `apu`, PartyVInfo = `apv` (empty when absent), 256 bits;
/// - `enc` = `A256GCM`, the additional data the ASCII protected header;
/// - the plaintext is the `nma_data` JSON object (`token`, `redeem_url`, `data`).
/// Another alg or enc, `zip`, `crit`, a wrong key or a bad tag is `OutOfBandError.decryptionError`; a JWE that
/// is not well-formed (bad base64url, no valid `epk`, a non-base64url `apu`) is `OutOfBandError.malformedPayload`.
public struct PayloadDecrypter {
  static let algorithm = "ECDH-ES"
  static let encryption = "A256GCM"

  let key: () throws -> P256.KeyAgreement.PrivateKey

  /// Decrypts with `key()`, called only when a payload is encrypted.
  public init(key: @escaping () throws -> P256.KeyAgreement.PrivateKey) { self.key = key }

  /// The plaintext of a compact JWE addressed to this device. A string that is not a well-formed compact JWE
  /// (five base64url parts, a JSON header, a valid P-256 `epk`, base64url `apu`/`apv`, a 96-bit IV and a 128-bit
  /// tag) is `malformedPayload`, naming what is wrong; a well-formed JWE of another algorithm, one this device
  /// cannot open (another key, or altered in transit) or no key to open it with is `decryptionError`.
  public func decrypt(_ jwe: String) throws(OutOfBandError) -> [UInt8] {
    func malformed(_ what: String) -> OutOfBandError { .malformedPayload(reason: "the encrypted nma_data \(what)") }
    let parts = jwe.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
    guard parts.count == 5 else { throw malformed("is not a compact JWE (five parts separated by dots)") }
    guard let headerBytes = Base64URL.decode(parts[0]), let header = JSONValue.parseObject(headerBytes) else {
      throw malformed("has a protected header that is not base64url JSON")
    }
    guard Base64URL.decode(parts[1]) != nil, let iv = Base64URL.decode(parts[2]),
      let ciphertext = Base64URL.decode(parts[3]), let tag = Base64URL.decode(parts[4])
    else { throw malformed("has a part that is not base64url") }
    guard parts[1].isEmpty, header["alg"]?.asString == Self.algorithm, header["enc"]?.asString == Self.encryption,
      header["zip"] == nil, header["crit"] == nil
    else { throw .decryptionError }
    guard let epk = header["epk"]?.asObject, epk["kty"]?.asString == "EC", epk["crv"]?.asString == "P-256",
      let x = epk["x"]?.asString.flatMap(Base64URL.decode), let y = epk["y"]?.asString.flatMap(Base64URL.decode),
      x.count == 32, y.count == 32,
      let ephemeral = try? P256.KeyAgreement.PublicKey(x963Representation: [0x04] + x + y)
    else { throw malformed("has no valid P-256 epk") }
    func partyInfo(_ name: String) throws(OutOfBandError) -> [UInt8] {
      guard let value = header[name] else { return [] }
      guard let s = value.asString, let bytes = Base64URL.decode(s) else {
        throw malformed("has an \(name) that is not a base64url string")
      }
      return bytes
    }
    let apu = try partyInfo("apu")
    let apv = try partyInfo("apv")
    guard iv.count == 12, tag.count == 16 else { throw malformed("has an IV or tag of the wrong size for A256GCM") }
    guard let own = try? key(), let shared = try? own.sharedSecretFromKeyAgreement(with: ephemeral) else {
      throw .decryptionError
    }
    var z = shared.withUnsafeBytes { [UInt8]($0) }
    defer { wipe(&z) }
    var contentKey = Self.concatKDF(z: z, algorithmID: Array(Self.encryption.utf8), apu: apu, apv: apv, bits: 256)
    defer { wipe(&contentKey) }
    guard let nonce = try? AES.GCM.Nonce(data: iv),
      let box = try? AES.GCM.SealedBox(nonce: nonce, ciphertext: ciphertext, tag: tag),
      let plain = try? AES.GCM.open(box, using: SymmetricKey(data: contentKey), authenticating: Array(parts[0].utf8))
    else { throw .decryptionError }
    return Array(plain)
  }

  /// RFC 7518 §4.6.2 (NIST SP 800-56A Concat KDF, SHA-256) for keys of up to 256 bits (one round).
  package static func concatKDF(z: [UInt8], algorithmID: [UInt8], apu: [UInt8], apv: [UInt8], bits: Int) -> [UInt8] {
    precondition(bits > 0 && bits <= 256 && bits % 8 == 0)
    func be32(_ n: Int) -> [UInt8] {
      [UInt8(n >> 24 & 0xFF), UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)]
    }
    var input = be32(1) + z
    input += be32(algorithmID.count) + algorithmID
    input += be32(apu.count) + apu
    input += be32(apv.count) + apv
    input += be32(bits)
    defer { wipe(&input) }
    return Array(Array(SHA256.hash(data: input)).prefix(bits / 8))
  }
}

extension LocalData {
  /// Decrypts payloads addressed to this device (its encryption key is read only when a payload is encrypted;
  /// without a key file there is nothing to decrypt with, and none is made).
  public var payloadDecrypter: PayloadDecrypter {
    let file = URL(fileURLWithPath: path).deletingLastPathComponent().appendingPathComponent(DeviceKeys.fileName).path
    return PayloadDecrypter {
      guard FileManager.default.fileExists(atPath: file) else { throw LocalDataError.notFound(DeviceKeys.fileName) }
      return try self.deviceKeys().encryption
    }
  }
}
