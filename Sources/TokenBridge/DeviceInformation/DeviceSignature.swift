import FoundationEssentials
import Platform
import SystemCrypto
import UAFCore

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// The device's own key pairs (the SDK keeps them in the platform keychain): a P-256 signature key, whose public
/// half every dispatch target of this device carries and which signs `Device-Signature` requests, and a P-256
/// encryption key (ECDH-ES) for `application/jose` payloads addressed to this device.
///
/// Kept in `device-keys.json` next to the database, not in it: the database holds no secrets (it is listed,
/// copied and migrated freely), while this file is created 0600 and refused when it is a link, another user's or
/// writable by others (the same checks as the database), read and written under the local data's write lock.
/// Software keys: they authenticate this machine to the server's device service, not the user (the user's UAF
/// keys stay on the token).
public struct DeviceKeys {
  public let signing: P256.Signing.PrivateKey
  public let encryption: P256.KeyAgreement.PrivateKey

  public init(signing: P256.Signing.PrivateKey, encryption: P256.KeyAgreement.PrivateKey) {
    self.signing = signing
    self.encryption = encryption
  }

  static let fileName = "device-keys.json"

  /// The public signature key as a JWK (serialized JSON, the `signatureKey` of a dispatch target).
  public var signatureJWK: String { Self.jwk(signing.publicKey.x963Representation, use: "sig") }
  /// The public encryption key as a JWK (`encryptionKey`).
  public var encryptionJWK: String { Self.jwk(encryption.publicKey.x963Representation, use: "enc") }

  static func jwk(_ x963: Data, use: String) -> String {
    let point = Array(x963)  // 0x04 || X || Y
    let fields = [
      "kty": "EC", "crv": "P-256", "use": use, "x": Base64URL.encode(Array(point[1..<33])),
      "y": Base64URL.encode(Array(point[33..<65])),
    ]
    let enc = JSONEncoder()
    enc.outputFormatting = [.sortedKeys]
    return String(decoding: (try? enc.encode(fields)) ?? Data(), as: UTF8.self)
  }

  struct Stored: Codable {
    var version: Int
    var signature: String
    var encryption: String
  }
}

extension LocalData {
  /// This device's keys: read from `device-keys.json`, or made and written there (0600) the first time.
  public func deviceKeys() throws(LocalDataError) -> DeviceKeys {
    do { try SystemLibrary.crypto.load() } catch { throw .libraryMissing(error) }
    let file = URL(fileURLWithPath: path).deletingLastPathComponent().appendingPathComponent(DeviceKeys.fileName).path
    let lock = self.lock
    return try run {
      try lock.withLock {
        let fd = try FileSafety.openFile(file, flags: O_RDWR)
        defer { close(fd) }
        var bytes = try Self.readAll(fd, path: file)
        defer { wipe(&bytes) }
        if !bytes.isEmpty {
          guard let stored = try? JSONDecoder().decode(DeviceKeys.Stored.self, from: Data(bytes)),
            var s = Base64URL.decode(stored.signature), var e = Base64URL.decode(stored.encryption)
          else { throw LocalDataError.unavailable(path: file, reason: "it is not a device key file") }
          defer {
            wipe(&s)
            wipe(&e)
          }
          guard let signing = try? P256.Signing.PrivateKey(rawRepresentation: s),
            let encryption = try? P256.KeyAgreement.PrivateKey(rawRepresentation: e)
          else { throw LocalDataError.unavailable(path: file, reason: "it holds no valid P-256 keys") }
          return DeviceKeys(signing: signing, encryption: encryption)
        }
        let keys = DeviceKeys(signing: P256.Signing.PrivateKey(), encryption: P256.KeyAgreement.PrivateKey())
        var out = Array(
          (try? JSONEncoder().encode(
            DeviceKeys.Stored(
              version: 1, signature: Base64URL.encode(Array(keys.signing.rawRepresentation)),
              encryption: Base64URL.encode(Array(keys.encryption.rawRepresentation))))) ?? Data())
        defer { wipe(&out) }
        var written = 0
        while written < out.count {
          let n = out[written...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
          if n < 0 && errno == EINTR { continue }
          guard n > 0 else {
            _ = ftruncate(fd, 0)
            throw LocalDataError.unavailable(path: file, reason: String(cString: strerror(errno)))
          }
          written += n
        }
        guard fsync(fd) == 0 else {
          throw LocalDataError.unavailable(path: file, reason: String(cString: strerror(errno)))
        }
        return keys
      }
    }
  }

  static func readAll(_ fd: Int32, path: String) throws -> [UInt8] {
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    defer { wipe(&chunk) }
    while true {
      let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
      if n < 0 && errno == EINTR { continue }
      if n < 0 { throw LocalDataError.unavailable(path: path, reason: String(cString: strerror(errno))) }
      if n == 0 { return bytes }
      bytes += chunk[0..<n]
      if bytes.count > 64 * 1024 { throw LocalDataError.unavailable(path: path, reason: "it is too large") }
    }
  }
}

/// The `Device-Signature` of the device service (backend contract §3.5): a compact JWS (RFC 7515), ES256 over
/// `base64url(header) . base64url(payload)`, the signature raw `r || s` (RFC 7518 §3.4), signed with the
/// device's signature key, which the dispatch target `dispatchTargetId` carries. A unique `requestId` and the
/// creation time make every signature usable once (the server refuses replays and stale times).
public enum DeviceSignature {
  static let header = #"{"alg":"ES256","typ":"JOSE"}"#

  /// A fresh request id: 32 random bytes, base64url (43 characters; the contract allows up to 64).
  static func requestID() -> String {
    var g = SystemRandomNumberGenerator()
    return Base64URL.encode((0..<32).map { _ in UInt8.random(in: 0...255, using: &g) })
  }

  static func make(_ payload: DeviceWire.SignedPayload, key: P256.Signing.PrivateKey) -> String {
    let enc = JSONEncoder()
    enc.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    let body = (try? enc.encode(payload)) ?? Data()
    let input = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(body))
    let signature = (try? key.signature(for: Data(input.utf8)).rawRepresentation) ?? Data()
    return input + "." + Base64URL.encode(Array(signature))
  }

  /// A signature for `dispatchTargetId`, made now.
  public static func sign(
    dispatchTargetID: String, key: P256.Signing.PrivateKey, now: Date = Date(), name: String? = nil,
    target: String? = nil, disablePush: Bool? = nil
  ) -> String {
    make(
      .init(
        dispatchTargetId: dispatchTargetID, requestId: requestID(),
        creationTimeInEpochMillis: Int64((now.timeIntervalSince1970 * 1000).rounded()), name: name, target: target,
        disablePush: disablePush), key: key)
  }
}
