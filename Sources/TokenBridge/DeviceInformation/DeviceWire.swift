import FoundationEssentials
import Platform
import TokenDevices

/// Every wire choice of the dispatch-target and device services made where the backend contract
/// (specs/backend-contract.md §3.1, §3.5, "Decisions") is silent or unconfirmed, in one place so each can follow
/// the real nevisFIDO later. The reference relying party (Tools/rp) serves the same.
public enum DeviceWire {
  // MARK: Paths

  /// Dispatch Target Service (§3.1, confirmed): create (POST), modify (PATCH …/{id}), delete (DELETE …/{id}).
  static let dispatchTargets = "/nevisfido/token/dispatch/targets"
  /// Get Device Credentials (§3.5, confirmed path): GET with `Device-Signature`.
  static func credentials(_ deviceID: String) -> String { "/nevisfido/devices/credentials/\(escaped(deviceID))" }
  /// Choice: one credential of the device is deleted with DELETE on the credentials path plus `?aaid=&keyId=`.
  static func credential(_ deviceID: String) -> String { credentials(deviceID) }
  /// Choice (contract "Decisions"): pending out-of-band operations, GET with `Device-Signature`.
  static func operations(_ deviceID: String) -> String { "/nevisfido/devices/\(escaped(deviceID))/operations" }

  /// Whether `s` is a dot-segment ("." or "..", RFC 3986 §3.3) as it is, or once any number of rounds of
  /// percent-decoding have been applied (WHATWG URL §4.4 takes "%2e" for "."; a server may decode twice). Such an id
  /// cannot be one path segment: whatever its encoding, some layer resolves it against the path before it.
  static func isDotSegment(_ s: String) -> Bool {
    var bytes = Array(s.utf8)
    for _ in 0..<8 {
      if bytes == [0x2E] || bytes == [0x2E, 0x2E] { return true }
      let decoded = percentDecoded(bytes)
      if decoded == bytes { return false }
      bytes = decoded
    }
    return false
  }

  /// `%XX` (hex, either case) replaced by its byte; anything else left as it is.
  static func percentDecoded(_ b: [UInt8]) -> [UInt8] {
    func hex(_ c: UInt8) -> UInt8? {
      switch c {
      case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
      case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
      case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
      default: nil
      }
    }
    var out: [UInt8] = []
    var i = 0
    while i < b.count {
      if b[i] == UInt8(ascii: "%"), i + 2 < b.count, let h = hex(b[i + 1]), let l = hex(b[i + 2]) {
        out.append(h << 4 | l)
        i += 3
      } else {
        out.append(b[i])
        i += 1
      }
    }
    return out
  }

  /// `s` as one path segment, percent-encoded exactly once: RFC 3986 unreserved characters stay, every other
  /// UTF-8 byte becomes %XX, and a segment that is all dots ("." or "..") has them as %2E so that no URL layer
  /// (ours, libcurl's dot-segment removal, a proxy) resolves it. The result is put into the URL as it is
  /// (`DeviceService.request` sets the percent-encoded path), never encoded again.
  static func escaped(_ s: String) -> String {
    if !s.isEmpty, s.allSatisfy({ $0 == "." }) { return String(repeating: "%2E", count: s.count) }
    return s.utf8.map { b in
      switch b {
      case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
        UInt8(ascii: "0")...UInt8(ascii: "9"),
        UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
        String(UnicodeScalar(b))
      default: "%" + Hex.digits(b, width: 2, uppercase: true)
      }
    }.joined()
  }

  // MARK: Headers

  static let signatureHeader = "Device-Signature"
  static let json = "application/json"
  static let jose = "application/jose;charset=UTF-8"

  // MARK: Dispatchers (§3.2 names)

  /// The dispatcher of a target with a push token (FCM registration token).
  static let pushDispatcher = "firebase-cloud-messaging"
  /// Choice: a target without a push token gets the `link` dispatcher (the server can still make links/QR codes).
  static let noPushDispatcher = "link"

  // MARK: Bodies

  /// Dispatch target creation (§3.1 fields). Choice: `signatureKey` and `encryptionKey` are serialized JWK JSON
  /// (public P-256 keys: `kty`, `crv`, `x`, `y`, `use`); `target` is absent when push is disabled.
  struct CreateTarget: Encodable {
    var username: String
    var name: String
    var deviceId: String
    var target: String?
    var dispatcher: String
    var signatureKey: String
    var encryptionKey: String
  }

  struct CreatedTarget: Decodable {
    var id: String
    var extId: String?
  }

  /// The `Device-Signature` (and PATCH/DELETE body) JWS payload. The three first fields are the contract's
  /// (§3.5); choice: a modification adds `name` and `target` (push token), with `disablePush` to remove it.
  struct SignedPayload: Codable, Equatable {
    var dispatchTargetId: String
    var requestId: String
    var creationTimeInEpochMillis: Int64
    var name: String?
    var target: String?
    var disablePush: Bool?
  }

  /// Choice: the Get Device Credentials answer is plain JSON (not JOSE): the device's dispatch targets as the
  /// server holds them and the UAF credentials linked to the device.
  struct DeviceAnswer: Decodable {
    struct Target: Decodable {
      var id: String
      var username: String
      var name: String
      var target: String?
    }
    struct Credential: Decodable {
      var aaid: String
      var keyId: String
      var username: String
    }
    var dispatchTargets: [Target]
    var credentials: [Credential]
  }

  /// Choice: the pending-operations answer. Each operation carries the SDK's PendingOutOfBandOperation fields
  /// (`creationTimeInEpochMillis`, `dispatchChannel`, `payload` — the out-of-band payload JSON object of §4 —
  /// and `dispatchInformation`) plus an `id` (the dispatch's session id) to pick it by.
  struct OperationsAnswer: Decodable {
    var operations: [Operation]
    struct Operation: Decodable {
      var id: String
      var creationTimeInEpochMillis: Int64
      var dispatchChannel: String?
      var dispatchInformation: String?
      var payload: RawJSON
    }
  }

  /// The Get Device Credentials answer read (nil: not one). Also the `device-answer` fuzz target's entry.
  package static func deviceView(_ data: Data) -> DeviceView? {
    guard let a = try? JSONDecoder().decode(DeviceAnswer.self, from: data) else { return nil }
    return DeviceView(
      targets: a.dispatchTargets.map { .init(id: $0.id, username: $0.username, name: $0.name, pushToken: $0.target) },
      credentials: a.credentials.map { .init(username: $0.username, aaid: $0.aaid, keyID: $0.keyId) })
  }

  /// The pending-operations answer read, each payload decoded with `decrypter` (nil: not one). Also the
  /// `device-answer` fuzz target's entry.
  package static func pendingOperations(_ data: Data, server: String, decrypter: PayloadDecrypter)
    -> [PendingOutOfBandOperation]?
  {
    guard let a = try? JSONDecoder().decode(OperationsAnswer.self, from: data) else { return nil }
    return a.operations.map { op in
      let payload: Result<OutOfBandPayload, OutOfBandError>
      do throws(OutOfBandError) {
        payload = .success(try OutOfBandPayload(json: op.payload.bytes, decrypter: decrypter))
      } catch {
        payload = .failure(error)
      }
      return PendingOutOfBandOperation(
        id: op.id, server: server, creationTimeInEpochMillis: op.creationTimeInEpochMillis,
        dispatchChannel: op.dispatchChannel, dispatchInformation: op.dispatchInformation,
        payloadJSON: op.payload.bytes, payload: payload)
    }
  }

  /// Choice: the registration response's `context` (SendUAFResponse, §1.2) carries `{"deviceId": …}`, which is
  /// how the server links the new credential to this device (contract open question 4).
  static func registrationContext(deviceID: String) -> String {
    String(decoding: (try? JSONEncoder().encode(["deviceId": deviceID])) ?? Data(), as: UTF8.self)
  }
}

/// A JSON value kept as its bytes (the out-of-band payload of a pending operation, handed on unchanged).
struct RawJSON: Decodable {
  var bytes: [UInt8]
  init(from decoder: Decoder) throws {
    bytes = try decoder.singleValueContainer().decode(JSONValue.self).serialized
  }
}
