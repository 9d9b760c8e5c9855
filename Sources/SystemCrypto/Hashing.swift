import CSystemCrypto
import FoundationEssentials
import Glibc

/// Why an operation of this module failed.
public enum CryptoError: Error, Equatable, Sendable {
  /// A key of a size the algorithm does not take.
  case incorrectKeySize
  /// A nonce, tag, point or signature of the wrong size or shape.
  case incorrectParameterSize
  /// Not a valid key (a scalar out of range, a point not on the curve).
  case invalidKey
  /// A sealed box whose tag does not authenticate.
  case authenticationFailure
  /// libcrypto refused the operation.
  case failed
  /// libcrypto cannot be loaded (the reason dlopen gave).
  case unavailable(String)
}

/// Turns a CSystemCrypto status into a result.
@inline(__always)
func check(_ status: Int32, invalid: CryptoError = .invalidKey) throws(CryptoError) {
  switch status {
  case Int32(TBC_OK): return
  case Int32(TBC_INVALID): throw invalid
  case Int32(TBC_UNAVAILABLE): throw .unavailable(tbc_unavailable().map { String(cString: $0) } ?? "libcrypto")
  default: throw .failed
  }
}

/// For operations that cannot fail on valid input (hashing, HMAC, drawing random bytes). Callers load libcrypto
/// first and report a missing one as their own error (the client: `SystemLibrary.crypto`); reaching this without
/// it, or libcrypto refusing, is a broken installation: one line, then abort (as CLazy does for any library).
func mustSucceed(_ status: Int32, _ what: StaticString) {
  do { try check(status) } catch {
    let line = Array("internal error: \(what) failed: \(error) (libcrypto.so.3, Debian's libssl3)\n".utf8)
    _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    abort()
  }
}

/// A hash's output.
public protocol Digest: Sequence, Sendable where Element == UInt8 {
  func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R
}

/// A SHA-2 hash function.
public protocol HashFunction: Sendable {
  associatedtype Output: Digest
  static func hash<D: DataProtocol>(data: D) -> Output
  init()
  mutating func update<D: DataProtocol>(data: D)
  func finalize() -> Output
}

/// The bytes of a digest or authentication code.
public struct DigestBytes: Digest, Hashable, CustomStringConvertible {
  let bytes: [UInt8]
  public func makeIterator() -> IndexingIterator<[UInt8]> { bytes.makeIterator() }
  public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try bytes.withUnsafeBytes(body)
  }
  public var description: String { "Digest(\(bytes.count) bytes)" }
}

func hash(bits: Int32, _ data: [UInt8]) -> DigestBytes {
  var out = [UInt8](repeating: 0, count: Int(bits) / 8)
  mustSucceed(tbc_hash(bits, data, data.count, &out), "SHA-2")
  return DigestBytes(bytes: out)
}

/// The output size of a SHA-2 function.
public protocol SHA2Width: Sendable { static var bits: Int32 { get } }
public enum SHA2Width256: SHA2Width { public static var bits: Int32 { 256 } }
public enum SHA2Width384: SHA2Width { public static var bits: Int32 { 384 } }

/// SHA-256 (FIPS 180-4).
public typealias SHA256 = SHA2<SHA2Width256>
/// SHA-384 (FIPS 180-4).
public typealias SHA384 = SHA2<SHA2Width384>

/// A SHA-2 function. The incremental form keeps the input until `finalize()`: every input here is small.
public struct SHA2<W: SHA2Width>: HashFunction {
  var input: [UInt8] = []
  public init() {}
  public static func hash<D: DataProtocol>(data: D) -> DigestBytes { SystemCrypto.hash(bits: W.bits, Array(data)) }
  public mutating func update<D: DataProtocol>(data: D) { input += data }
  public func finalize() -> DigestBytes { Self.hash(data: input) }
}

/// Key material held apart from ordinary arrays: one copy, zeroed when the last reference goes.
final class SecretBytes: @unchecked Sendable {
  // @unchecked: the buffer is written only inside init and read afterwards; deinit zeroes and frees it.
  private let buffer: UnsafeMutableRawBufferPointer

  init<E: Error>(count: Int, _ fill: (UnsafeMutableRawBufferPointer) throws(E) -> Void) throws(E) {
    buffer = .allocate(byteCount: max(count, 1), alignment: 1)
    let used = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count])
    do { try fill(used) } catch {
      tbc_wipe(buffer.baseAddress, buffer.count)
      buffer.deallocate()
      throw error
    }
    self.count = count
  }

  convenience init<D: ContiguousBytes>(copying bytes: D) {
    let n = bytes.withUnsafeBytes { $0.count }
    self.init(count: n) { out in bytes.withUnsafeBytes { out.copyMemory(from: $0) } }
  }

  let count: Int

  func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try body(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
  }

  deinit {
    tbc_wipe(buffer.baseAddress, buffer.count)
    buffer.deallocate()
  }
}

/// A symmetric key (HMAC, HKDF output, AES-GCM), zeroed when it goes.
public struct SymmetricKey: Sendable, ContiguousBytes {
  let secret: SecretBytes
  public init<D: ContiguousBytes>(data: D) { secret = SecretBytes(copying: data) }
  init(secret: SecretBytes) { self.secret = secret }
  public var bitCount: Int { secret.count * 8 }
  public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try secret.withUnsafeBytes(body)
  }
}

/// HMAC (RFC 2104) over a hash function; SHA-256 is the one this project uses.
public enum HMAC<H: HashFunction> {}

extension HMAC where H == SHA256 {
  public static func authenticationCode<D: DataProtocol>(for data: D, using key: SymmetricKey) -> DigestBytes {
    var out = [UInt8](repeating: 0, count: 32)
    let message = Array(data)
    key.withUnsafeBytes { k in
      mustSucceed(tbc_hmac_sha256(bytes(k), k.count, message, message.count, &out), "HMAC-SHA-256")
    }
    return DigestBytes(bytes: out)
  }
}

/// HKDF (RFC 5869) over a hash function; SHA-256 is the one this project uses.
public enum HKDF<H: HashFunction> {}

extension HKDF where H == SHA256 {
  /// `outputByteCount` bytes (at most 255 · 32) from the input key material (not empty), salt and info.
  public static func deriveKey<S: DataProtocol, I: DataProtocol>(
    inputKeyMaterial: SymmetricKey, salt: S, info: I, outputByteCount: Int
  ) -> SymmetricKey {
    let salt = Array(salt)
    let info = Array(info)
    precondition(inputKeyMaterial.secret.count > 0 && outputByteCount > 0 && outputByteCount <= 255 * 32)
    let out = SecretBytes(count: outputByteCount) { out in
      inputKeyMaterial.withUnsafeBytes { ikm in
        mustSucceed(
          tbc_hkdf_sha256(bytes(ikm), ikm.count, salt, salt.count, info, info.count, mutableBytes(out), out.count),
          "HKDF-SHA-256")
      }
    }
    return SymmetricKey(secret: out)
  }
}

/// The bytes of a buffer as C's `const uint8_t *`.
func bytes(_ b: UnsafeRawBufferPointer) -> UnsafePointer<UInt8>? { b.baseAddress?.assumingMemoryBound(to: UInt8.self) }
func mutableBytes(_ b: UnsafeMutableRawBufferPointer) -> UnsafeMutablePointer<UInt8>? {
  b.baseAddress?.assumingMemoryBound(to: UInt8.self)
}

/// `count` bytes from libcrypto's generator (RAND_bytes).
func randomBytes(_ count: Int) -> [UInt8] {
  var out = [UInt8](repeating: 0, count: count)
  mustSucceed(tbc_random(&out, count), "RAND_bytes")
  return out
}
