import FoundationEssentials
import Glibc
import UAFCore

/// Why a dispatch-target or device-service exchange failed (the SDK's DeviceInformationChange errors and more).
public enum DeviceServiceError: Error, Equatable, Sendable {
  /// No registration on this machine yet, so no device information.
  case noDeviceInformation
  /// No dispatch target of this device at `server`: nothing to sign a device request with.
  case noDispatchTarget(server: String)
  /// The server refused the `Device-Signature` (bad signature, replayed or stale request): HTTP 401.
  case signatureRefused(server: String)
  /// The server already has a dispatch target of this user with that name (HTTP 422; the SDK's NameAlreadyExists).
  case nameAlreadyExists(name: String, server: String)
  /// The server does not know the dispatch target (HTTP 404; the SDK's NotFound).
  case notFound(dispatchTargetID: String, server: String)
  /// The server named a dispatch target with an id that is, or percent-decodes to, a URL dot-segment ("." or "..",
  /// RFC 3986 §3.3): in a request path, URL parsers (WHATWG URL §4.4 takes "%2e" as ".") and servers resolve it,
  /// and a request about the target would reach another resource. Refused, never sent.
  case unsafeTargetID(String, server: String)
  /// `pending --run ID`: no live operation with that id.
  case operationNotFound(String)
  case backend(BackendError)
  case localData(LocalDataError)
}

/// A bounded retry on network failures: a few tries with a doubling, capped delay. Only failures that say
/// nothing about the request (no connection, no answer in time, HTTP 5xx) are retried; a 4xx never is.
public struct RetryPolicy: Sendable {
  public var attempts: Int
  public var firstDelay: Double
  public var maxDelay: Double
  public static let standard = RetryPolicy(attempts: 3, firstDelay: 0.5, maxDelay: 2)

  public init(attempts: Int, firstDelay: Double, maxDelay: Double) {
    self.attempts = max(1, attempts)
    self.firstDelay = firstDelay
    self.maxDelay = maxDelay
  }

  static func retriable(_ e: BackendError) -> Bool {
    switch e {
    case .unreachable, .timedOut: true
    case .http(let code): code >= 500
    default: false
    }
  }

  /// Sleeps `seconds` (as Thread.sleep(forTimeInterval:) did: through signals, nothing for 0 or less).
  static func sleep(seconds: Double) {
    guard seconds > 0 else { return }
    let s = min(seconds, Double(Int32.max))
    let whole = s.rounded(.down)
    var t = timespec(tv_sec: Int(whole), tv_nsec: Int((s - whole) * 1_000_000_000))
    var rest = timespec()
    while nanosleep(&t, &rest) != 0 && errno == EINTR { t = rest }
  }

  /// Runs `body` until it succeeds, fails for good, or the tries are spent (the last failure is thrown).
  func run<T>(_ body: () throws(BackendError) -> T) throws(BackendError) -> T {
    var delay = firstDelay
    for attempt in 1... {
      do { return try body() } catch {
        guard attempt < attempts, Self.retriable(error) else { throw error }
        Self.sleep(seconds: min(delay, maxDelay))
        delay = min(delay * 2, maxDelay)
      }
    }
    fatalError("unreachable")
  }
}

/// A pending out-of-band operation (the SDK's PendingOutOfBandOperation) at one server.
public struct PendingOutOfBandOperation: Sendable {
  public var id: String
  public var server: String
  public var creationTimeInEpochMillis: Int64
  public var dispatchChannel: String?
  public var dispatchInformation: String?
  /// The out-of-band payload JSON, as the server sent it (run it like a scanned QR code).
  public var payloadJSON: [UInt8]
  /// The payload decoded, or why it cannot be.
  public var payload: Result<OutOfBandPayload, OutOfBandError>
}

/// The dispatch-target and device services of one server (backend contract §3.1, §3.5; wire choices in
/// `DeviceWire`), over the server's `BackendClient` (the one HTTP path), each call retried per `RetryPolicy`.
public struct DeviceService {
  public let backend: BackendClient
  public var retry: RetryPolicy
  let server: String
  /// Largest device-service answer read: targets and credentials of a device, or its pending operations.
  public static let answerLimit = 1 << 20

  public init(server: String, timeout: Double, retry: RetryPolicy = .standard) throws(DeviceServiceError) {
    do { backend = try BackendClient(server: server, timeout: timeout) } catch {
      throw .backend(.insecureURL(server))
    }
    self.server = server
    self.retry = retry
  }

  func request(
    _ method: String, _ path: String, query: [URLQueryItem] = [], body: Data? = nil, contentType: String? = nil,
    accept: String = DeviceWire.json, signature: String? = nil
  ) -> HTTPRequest {
    // `path` is percent-encoded already (`DeviceWire.escaped` segments): set as it is, so that a `%` of an id's
    // encoding is not encoded a second time (appendingPathComponent would) and `%2E%2E` stays a name.
    var c = URLComponents(url: backend.base, resolvingAgainstBaseURL: false)!
    c.percentEncodedPath =
      (c.percentEncodedPath.hasSuffix("/") ? String(c.percentEncodedPath.dropLast()) : c.percentEncodedPath) + path
    if !query.isEmpty { c.queryItems = query }
    var r = HTTPRequest(url: c.url!)
    r.httpMethod = method
    r.setValue(accept, forHTTPHeaderField: "Accept")
    if let contentType { r.setValue(contentType, forHTTPHeaderField: "Content-Type") }
    if let signature { r.setValue(signature, forHTTPHeaderField: DeviceWire.signatureHeader) }
    r.httpBody = body
    return r
  }

  /// One exchange (retried); the HTTP status and body. 2xx, 401, 404 and 422 are answers here; other statuses
  /// are `BackendError.http`.
  func exchange(_ make: () -> HTTPRequest) throws(DeviceServiceError) -> (Int, Data) {
    do {
      return try retry.run { () throws(BackendError) -> (Int, Data) in
        let (data, response) = try backend.exchange(make(), limit: Self.answerLimit)
        let s = response.statusCode
        guard (200..<300).contains(s) || s == 401 || s == 404 || s == 422 else { throw .http(s) }
        return (s, data)
      }
    } catch { throw .backend(error) }
  }

  /// Creates the dispatch target of `username` for this device; returns its id.
  public func createTarget(username: String, device: DeviceInformation, keys: DeviceKeys) throws(DeviceServiceError)
    -> String
  {
    let body = DeviceWire.CreateTarget(
      username: username, name: device.name, deviceId: device.deviceID, target: device.pushToken,
      dispatcher: device.pushToken == nil ? DeviceWire.noPushDispatcher : DeviceWire.pushDispatcher,
      signatureKey: keys.signatureJWK, encryptionKey: keys.encryptionJWK)
    let data = try? JSONEncoder().encode(body)
    let (status, answer) = try exchange {
      request(
        "POST", DeviceWire.dispatchTargets, body: data, contentType: DeviceWire.json + ";charset=UTF-8")
    }
    switch status {
    case 422: throw .nameAlreadyExists(name: device.name, server: server)
    case 401: throw .signatureRefused(server: server)
    case 404: throw .backend(.http(404))
    default: break
    }
    guard let created = try? JSONDecoder().decode(DeviceWire.CreatedTarget.self, from: answer), !created.id.isEmpty
    else { throw .backend(.malformedAnswer("dispatch target answer without id")) }
    try checkTargetID(created.id)
    return created.id
  }

  /// What the server links to this device, signed with one of `targets` (the first the server knows); nil when
  /// it knows none of them. Also returns the target that signed.
  public func fetchDevice(_ device: DeviceInformation, targets: [DispatchTargetRecord], keys: DeviceKeys)
    throws(DeviceServiceError) -> (view: DeviceView, signer: String)?
  {
    for t in targets {
      let (status, data) = try exchange {
        request(
          "GET", DeviceWire.credentials(device.deviceID), accept: DeviceWire.jose + ", " + DeviceWire.json,
          signature: DeviceSignature.sign(dispatchTargetID: t.id, key: keys.signing))
      }
      if status == 404 { continue }
      if status == 401 { throw .signatureRefused(server: server) }
      guard status == 200, let view = DeviceWire.deviceView(data) else {
        throw .backend(.malformedAnswer("device credentials answer"))
      }
      return (view, t.id)
    }
    return nil
  }

  /// Sets the name and push token of the dispatch target `id` (a JWS body signed with the device key).
  public func modifyTarget(_ id: String, name: String, pushToken: String?, keys: DeviceKeys) throws(DeviceServiceError)
  {
    try checkTargetID(id)
    let (status, _) = try exchange {
      let jws = DeviceSignature.sign(
        dispatchTargetID: id, key: keys.signing, name: name, target: pushToken, disablePush: pushToken == nil)
      return request(
        "PATCH", DeviceWire.dispatchTargets + "/" + DeviceWire.escaped(id), body: Data(jws.utf8),
        contentType: DeviceWire.jose)
    }
    try check(status, target: id, name: name)
  }

  /// Deletes the dispatch target `id` (signed as that target).
  public func deleteTarget(_ id: String, keys: DeviceKeys) throws(DeviceServiceError) {
    try checkTargetID(id)
    let (status, _) = try exchange {
      request(
        "DELETE", DeviceWire.dispatchTargets + "/" + DeviceWire.escaped(id),
        signature: DeviceSignature.sign(dispatchTargetID: id, key: keys.signing))
    }
    try check(status, target: id, name: nil)
  }

  /// Deletes a credential the server links to this device (signed as `signer`, a target the server knows).
  public func deleteCredential(
    aaid: String, keyID: String, device: DeviceInformation, signer: String, keys: DeviceKeys
  ) throws(DeviceServiceError) {
    let (status, _) = try exchange {
      request(
        "DELETE", DeviceWire.credential(device.deviceID),
        query: [URLQueryItem(name: "aaid", value: aaid), URLQueryItem(name: "keyId", value: keyID)],
        signature: DeviceSignature.sign(dispatchTargetID: signer, key: keys.signing))
    }
    try check(status, target: keyID, name: nil)
  }

  /// The out-of-band operations of this device that are neither processed nor timed out.
  public func pendingOperations(_ device: DeviceInformation, targets: [DispatchTargetRecord], keys: DeviceKeys)
    throws(DeviceServiceError) -> [PendingOutOfBandOperation]
  {
    guard !targets.isEmpty else { throw .noDispatchTarget(server: server) }
    for t in targets {
      let (status, data) = try exchange {
        request(
          "GET", DeviceWire.operations(device.deviceID),
          signature: DeviceSignature.sign(dispatchTargetID: t.id, key: keys.signing))
      }
      if status == 404 { continue }
      if status == 401 { throw .signatureRefused(server: server) }
      guard status == 200,
        let operations = DeviceWire.pendingOperations(
          data, server: server, decrypter: PayloadDecrypter { keys.encryption })
      else {
        throw .backend(.malformedAnswer("pending operations answer"))
      }
      return operations
    }
    throw .noDispatchTarget(server: server)
  }

  /// Refuses a dispatch-target id that is a dot-segment (`DeviceWire.isDotSegment`) before it is put in a path.
  func checkTargetID(_ id: String) throws(DeviceServiceError) {
    if DeviceWire.isDotSegment(id) { throw .unsafeTargetID(id, server: server) }
  }

  func check(_ status: Int, target: String, name: String?) throws(DeviceServiceError) {
    switch status {
    case 401: throw .signatureRefused(server: server)
    case 404: throw .notFound(dispatchTargetID: target, server: server)
    case 422: throw .nameAlreadyExists(name: name ?? "", server: server)
    default: return
    }
  }
}

extension PendingOutOfBandOperation {
  /// The payload as a QR code's text (base64url of its JSON): what `tokenbridge oob --qr-text` runs.
  public var qrText: String { Base64URL.encode(payloadJSON) }

  /// The operation's name (registration, authentication, deregistration), when the payload decodes.
  public var operationName: String? {
    guard case .success(let p) = payload else { return nil }
    return ErrorReport.name(p.operation)
  }
}
