import CSystemCrypto
import FoundationEssentials

/// A NIST prime curve and the SHA-2 function its signatures hash with (P-256 with SHA-256, P-384 with SHA-384).
public protocol PrimeCurve: Sendable {
  static var bits: Int32 { get }
  /// DER of the SubjectPublicKeyInfo before the point (RFC 5480: id-ecPublicKey, the named curve, the BIT STRING).
  static var spkiPrefix: [UInt8] { get }
}

extension PrimeCurve {
  static var size: Int { Int(bits) / 8 }
  static var pointSize: Int { 1 + 2 * size }
}

/// NIST P-256 (secp256r1), signatures over SHA-256.
public enum P256: PrimeCurve {
  public static var bits: Int32 { 256 }
  public static var spkiPrefix: [UInt8] {
    [
      0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01, 0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE,
      0x3D, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
    ]
  }
  public enum Signing {
    public typealias PrivateKey = ECPrivateKey<P256, ECDSAUse>
    public typealias PublicKey = ECPublicKey<P256>
    public typealias ECDSASignature = ECDSASignatureValue<P256>
  }
  public enum KeyAgreement {
    public typealias PrivateKey = ECPrivateKey<P256, ECDHUse>
    public typealias PublicKey = ECPublicKey<P256>
  }
}

/// NIST P-384 (secp384r1), signatures over SHA-384.
public enum P384: PrimeCurve {
  public static var bits: Int32 { 384 }
  public static var spkiPrefix: [UInt8] {
    [
      0x30, 0x76, 0x30, 0x10, 0x06, 0x07, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01, 0x06, 0x05, 0x2B, 0x81, 0x04, 0x00,
      0x22, 0x03, 0x62, 0x00,
    ]
  }
  public enum Signing {
    public typealias PrivateKey = ECPrivateKey<P384, ECDSAUse>
    public typealias PublicKey = ECPublicKey<P384>
    public typealias ECDSASignature = ECDSASignatureValue<P384>
  }
}

/// A private scalar and its public point.
struct KeyPair<C: PrimeCurve>: Sendable {
  let scalar: SecretBytes
  let point: [UInt8]

  init() {
    var point = [UInt8](repeating: 0, count: C.pointSize)
    scalar = SecretBytes(count: C.size) { s in
      mustSucceed(tbc_ec_generate(C.bits, mutableBytes(s), &point), "EC key generation")
    }
    self.point = point
  }

  init<D: ContiguousBytes>(raw: D) throws(CryptoError) {
    guard raw.withUnsafeBytes({ $0.count }) == C.size else { throw .incorrectKeySize }
    let scalar = SecretBytes(copying: raw)
    var point = [UInt8](repeating: 0, count: C.pointSize)
    try check(scalar.withUnsafeBytes { tbc_ec_public(C.bits, bytes($0), &point) })
    self.scalar = scalar
    self.point = point
  }

  var raw: Data { scalar.withUnsafeBytes { Data($0) } }
}

/// A public key on the curve: an uncompressed point (SEC 1 §2.3.3).
public struct ECPublicKey<C: PrimeCurve>: Sendable {
  let point: [UInt8]

  init(point: [UInt8]) { self.point = point }

  /// 0x04 ‖ X ‖ Y; a point that is not on the curve is refused.
  public init<D: ContiguousBytes>(x963Representation: D) throws(CryptoError) {
    let point = x963Representation.withUnsafeBytes { Array($0) }
    guard point.count == C.pointSize, point.first == 0x04 else { throw .incorrectParameterSize }
    try check(tbc_ec_check_point(C.bits, point, point.count))
    self.point = point
  }

  public var x963Representation: Data { Data(point) }

  /// SubjectPublicKeyInfo (RFC 5480) as PEM (RFC 7468): 64 base64 characters a line, no newline at the end.
  public var pemRepresentation: String {
    let text = Data(C.spkiPrefix + point).base64EncodedString()
    var lines = ["-----BEGIN PUBLIC KEY-----"]
    var start = text.startIndex
    while start < text.endIndex {
      let end = text.index(start, offsetBy: 64, limitedBy: text.endIndex) ?? text.endIndex
      lines.append(String(text[start..<end]))
      start = end
    }
    lines.append("-----END PUBLIC KEY-----")
    return lines.joined(separator: "\n")
  }

  public func isValidSignature<D: Digest>(_ signature: ECDSASignatureValue<C>, for digest: D) -> Bool {
    guard let der = try? signature.der() else { return false }
    let d = digest.withUnsafeBytes { Array($0) }
    return tbc_ecdsa_verify(C.bits, point, d, d.count, der, der.count) == Int32(TBC_OK)
  }

  public func isValidSignature<D: DataProtocol>(_ signature: ECDSASignatureValue<C>, for data: D) -> Bool {
    isValidSignature(signature, for: hash(bits: C.bits, Array(data)))
  }
}

/// An ECDSA signature (r, s).
public struct ECDSASignatureValue<C: PrimeCurve>: Sendable {
  /// r ‖ s, each C.size bytes.
  let raw: [UInt8]

  public init<D: DataProtocol>(rawRepresentation: D) throws(CryptoError) {
    guard rawRepresentation.count == 2 * C.size else { throw .incorrectParameterSize }
    raw = Array(rawRepresentation)
  }

  /// The DER ECDSA-Sig-Value (RFC 3279 §2.2.3); anything but its one DER encoding is refused.
  public init<D: DataProtocol>(derRepresentation: D) throws(CryptoError) {
    let der = Array(derRepresentation)
    var raw = [UInt8](repeating: 0, count: 2 * C.size)
    try check(tbc_ecdsa_der_to_raw(C.bits, der, der.count, &raw), invalid: .incorrectParameterSize)
    self.raw = raw
  }

  public var rawRepresentation: Data { Data(raw) }
  public var derRepresentation: Data { (try? der()).map { Data($0) } ?? Data() }

  func der() throws(CryptoError) -> [UInt8] {
    var out = [UInt8](repeating: 0, count: 2 * C.size + 9)
    var n = out.count
    try check(tbc_ecdsa_raw_to_der(C.bits, raw, &out, &n))
    return Array(out[0..<n])
  }
}

/// What a private key is for: ECDSA signatures or ECDH key agreement (a key serves one of them, as in swift-crypto).
public enum ECDSAUse {}
public enum ECDHUse {}

/// A private key on the curve, for signatures or for key agreement (`Use`).
public struct ECPrivateKey<C: PrimeCurve, Use>: Sendable {
  let pair: KeyPair<C>

  /// A new key from libcrypto's generator.
  public init() { pair = KeyPair() }
  /// The private scalar, big-endian, C.size bytes; refused unless 1 <= scalar < n.
  public init<D: ContiguousBytes>(rawRepresentation: D) throws(CryptoError) {
    pair = try KeyPair(raw: rawRepresentation)
  }

  public var rawRepresentation: Data { pair.raw }
  public var publicKey: ECPublicKey<C> { ECPublicKey(point: pair.point) }
}

extension ECPrivateKey where Use == ECDSAUse {
  /// ECDSA over `digest` as given (the hash already taken).
  public func signature<D: Digest>(for digest: D) throws(CryptoError) -> ECDSASignatureValue<C> {
    let d = digest.withUnsafeBytes { Array($0) }
    var der = [UInt8](repeating: 0, count: 2 * C.size + 9)
    var n = der.count
    try check(pair.scalar.withUnsafeBytes { tbc_ecdsa_sign(C.bits, bytes($0), pair.point, d, d.count, &der, &n) })
    return try ECDSASignatureValue(derRepresentation: der[0..<n])
  }

  /// ECDSA with the curve's hash (SHA-256 for P-256) over `data`.
  public func signature<D: DataProtocol>(for data: D) throws(CryptoError) -> ECDSASignatureValue<C> {
    try signature(for: hash(bits: C.bits, Array(data)))
  }
}

extension ECPrivateKey where Use == ECDHUse {
  /// ECDH (SP 800-56A §5.7.1.2): the x-coordinate of the shared point.
  public func sharedSecretFromKeyAgreement(with peer: ECPublicKey<C>) throws(CryptoError) -> SharedSecret {
    let secret = try SecretBytes(count: C.size) { (out) throws(CryptoError) in
      try check(pair.scalar.withUnsafeBytes { tbc_ecdh(C.bits, bytes($0), pair.point, peer.point, mutableBytes(out)) })
    }
    return SharedSecret(secret: secret)
  }
}

/// The output of a key agreement, zeroed when it goes.
public struct SharedSecret: Sendable, ContiguousBytes {
  let secret: SecretBytes
  public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try secret.withUnsafeBytes(body)
  }
}
