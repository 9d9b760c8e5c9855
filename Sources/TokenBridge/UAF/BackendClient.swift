import FoundationEssentials
import UAFCore

/// GetUAFRequest / ReturnUAFRequest / SendUAFResponse / ServerResponse (UAF Client API and Transport §8.3).
public struct GetUAFRequest: Codable, Sendable {
  public var op: UAFOperation
  public var previousRequest: String?
  public var context: String?
}

public struct ReturnUAFRequest: Codable, Sendable {
  public var statusCode: Int
  public var uafRequest: String?
  public var op: UAFOperation?
  public var lifetimeMillis: Int?
}

public struct SendUAFResponse: Codable, Sendable {
  public var uafResponse: String
  public var context: String?
}

public struct ServerResponse: Codable, Sendable {
  public var statusCode: Int
  public var description: String?
}

/// Why a server exchange failed.
public enum BackendError: Error, Sendable, Equatable {
  /// The server answered a UAF status other than 1200 (see `UAFStatus`).
  case uafStatus(Int, description: String?)
  /// HTTP status outside 2xx.
  case http(Int)
  /// No answer in time.
  case timedOut(String)
  /// Could not connect (refused, DNS, TLS…).
  case unreachable(String)
  /// The answer is not what the contract says.
  case malformedAnswer(String)
  /// The answer's body is longer than `limit` bytes (said so by Content-Length, or sent): the transfer was
  /// stopped there, nothing of it was used.
  case answerTooLarge(limit: Int)
  /// The URL is plain http on a host that is not this machine's loopback (see `LoopbackHost`).
  case insecureURL(String)
  /// The HTTP library (libcurl, loaded at the first request) cannot be loaded; why.
  case httpLibraryMissing(String)
}

/// Facts only, for where a `BackendError` ends up as text below the CLI (e.g. in a facet-check reason).
extension BackendError: CustomStringConvertible {
  public var description: String {
    switch self {
    case .uafStatus(let code, _): "UAF status \(code)"
    case .http(let code): "HTTP \(code)"
    case .timedOut(let url): "no answer in time from \(url)"
    case .unreachable(let why): "unreachable: \(why)"
    case .malformedAnswer(let why): "malformed answer: \(why)"
    case .answerTooLarge(let limit): "the answer is longer than \(limit) bytes"
    case .insecureURL(let url): "\(url) is plain http and not this machine's loopback"
    case .httpLibraryMissing(let why): "no HTTP library: \(why)"
    }
  }
}

/// UAF status codes (backend contract §1.3) and what they mean for the user.
public enum UAFStatus {
  public static let ok = 1200
  public static func meaning(_ code: Int) -> String {
    switch code {
    case 1200: "OK"
    case 1202: "accepted, not yet completed"
    case 1400: "the server did not understand the message"
    case 1401: "the user is not authenticated, or the key is not this user's"
    case 1403: "the user may not do this"
    case 1404: "not found"
    case 1408: "the request timed out"
    case 1480: "the server does not know this authenticator model (AAID): its metadata is missing"
    case 1481: "the server does not know this key (KeyID): it was deregistered there"
    case 1490: "channel binding refused"
    case 1491: "the challenge is unknown, expired or already used"
    case 1492: "the server's policy does not accept this authenticator"
    case 1493: "this authenticator is revoked"
    case 1494: "the key is not acceptable"
    case 1495: "the algorithm is not acceptable"
    case 1496: "the attestation is not acceptable"
    case 1497: "the client's capabilities are not acceptable"
    case 1498: "the server refused the content (signature, counter, appID, facet or transaction)"
    case 1500: "internal server error"
    default: "status \(code)"
    }
  }
}

/// The nevisFIDO UAF endpoints (backend contract §2, §3.3) over HTTPS (http only for loopback).
public final class BackendClient: Sendable {
  public let base: URL
  let timeout: Double
  let loader: CappedExchange

  /// Largest UAF answer read (ReturnUAFRequest, ServerResponse, a redeem answer): a UAF message's own cap.
  public static let messageLimit = UAFMessageCodec.maxSize
  /// Largest trusted-facets list read. A list holds a few facet IDs (URLs ≤ 512 bytes, apk-key-hash and
  /// ios:bundle-id entries far shorter): 64 KiB is over a hundred maximal IDs, far beyond any real list.
  public static let facetsLimit = 64 << 10

  public init(server: String, timeout: Double = 60) throws(ConfigurationError) {
    guard let url = URL(string: server.hasSuffix("/") ? String(server.dropLast()) : server),
      url.scheme != nil, url.host != nil
    else { throw .invalidServer(server) }
    guard LoopbackHost.isAllowed(url) else { throw .insecureServer(server) }
    base = url
    self.timeout = timeout
    loader = CappedExchange(allowRedirect: RedirectRule.allows)
  }

  /// The origin (`scheme://host[:port]`): the default facet ID.
  public var origin: String {
    var s = "\(base.scheme!)://\(base.host!)"
    if let p = base.port { s += ":\(p)" }
    return s
  }

  /// Whether `host` is this machine's loopback (see `LoopbackHost`): the only hosts allowed plain http.
  public static func isLoopback(_ host: String) -> Bool { LoopbackHost.isLoopback(host) }

  static func path(_ op: UAFOperation, request: Bool) -> String {
    let name = op == .reg ? "registration" : op == .auth ? "authentication" : "deregistration"
    return request ? "/nevisfido/uaf/1.1/request/\(name)" : "/nevisfido/uaf/1.1/\(name)"
  }

  /// POST GetUAFRequest → the UAF request message (a JSON array, as a string).
  public func requestMessage(_ op: UAFOperation, context: [String: String]) throws(BackendError) -> String {
    let ctx = String(decoding: (try? JSONEncoder().encode(context)) ?? Data(), as: UTF8.self)
    let body = GetUAFRequest(op: op, previousRequest: nil, context: ctx)
    let answer: ReturnUAFRequest = try post(Self.path(op, request: true), body)
    guard answer.statusCode == UAFStatus.ok else {
      throw .uafStatus(answer.statusCode, description: nil)
    }
    guard let message = answer.uafRequest else { throw .malformedAnswer("ReturnUAFRequest without uafRequest") }
    return message
  }

  /// POST {"token"} to a redeem URL → the UAF request message.
  public func redeem(token: String, url: URL) throws(BackendError) -> String {
    let answer: ReturnUAFRequest = try post(url: url, ["token": token], contentType: "application/json")
    guard answer.statusCode == UAFStatus.ok, let message = answer.uafRequest else {
      throw .uafStatus(answer.statusCode, description: nil)
    }
    return message
  }

  /// POST SendUAFResponse; returns normally only for 1200.
  public func sendResponse(_ op: UAFOperation, _ message: String, context: String? = nil) throws(BackendError) {
    let answer: ServerResponse = try post(
      Self.path(op, request: false), SendUAFResponse(uafResponse: message, context: context))
    guard answer.statusCode == UAFStatus.ok else {
      throw .uafStatus(answer.statusCode, description: answer.description)
    }
  }

  /// GET the trusted-facets list of an appID (redirects only with FIDO-AppID-Redirect-Authorized: true).
  public func trustedFacets(_ url: URL) throws -> TrustedFacetsList {
    var req = HTTPRequest(url: url)
    req.setValue("application/fido.trusted-apps+json", forHTTPHeaderField: "Accept")
    let (data, response) = try exchange(req, limit: Self.facetsLimit)
    guard (200..<300).contains(response.statusCode) else { throw BackendError.http(response.statusCode) }
    do { return try JSONDecoder().decode(TrustedFacetsList.self, from: data) } catch {
      throw BackendError.malformedAnswer("trusted facets list")
    }
  }

  func post<B: Encodable, R: Decodable>(_ path: String, _ body: B) throws(BackendError) -> R {
    try post(url: base.appendingPathComponent(path), body, contentType: "application/fido+uaf;charset=UTF-8")
  }

  func post<B: Encodable, R: Decodable>(url: URL, _ body: B, contentType: String) throws(BackendError) -> R {
    var req = HTTPRequest(url: url)
    req.httpMethod = "POST"
    req.setValue(contentType, forHTTPHeaderField: "Content-Type")
    req.setValue("application/fido+uaf", forHTTPHeaderField: "Accept")
    req.httpBody = try? JSONEncoder().encode(body)
    let (data, response) = try exchange(req, limit: Self.messageLimit)
    guard (200..<300).contains(response.statusCode) else { throw .http(response.statusCode) }
    do { return try JSONDecoder().decode(R.self, from: data) } catch {
      throw .malformedAnswer("\(R.self) expected")
    }
  }

  /// One request, synchronously, within the configured timeout, its body read up to `limit` bytes. Every
  /// request this client makes goes through here.
  func exchange(_ request: HTTPRequest, limit: Int) throws(BackendError) -> (Data, HTTPResponse) {
    let url = request.url.absoluteString
    guard LoopbackHost.isAllowed(request.url) else { throw .insecureURL(url) }
    switch loader.run(request, limit: limit, timeout: timeout) {
    case .answer(let data, let response): return (data, response)
    case .tooLarge: throw .answerTooLarge(limit: limit)
    case .deadlinePassed: throw .timedOut(url)
    case .headersTooLarge: throw .malformedAnswer("header fields longer than \(CappedExchange.headerLimit) bytes")
    case .failed(let why): throw .unreachable("\(request.url.host ?? ""): \(why)")
    case .noLibrary(let why): throw .httpLibraryMissing(why)
    }
  }
}

/// Redirects are followed only when the answer carries `FIDO-AppID-Redirect-Authorized: true`
/// (UAF AppID and Facet Specification §3.1.2) and lead to https or loopback http, for every request this
/// client makes.
enum RedirectRule {
  @Sendable static func allows(_ response: HTTPResponse, _ request: HTTPRequest) -> Bool {
    let authorized = response.value(forHTTPHeaderField: "FIDO-AppID-Redirect-Authorized")?.lowercased() == "true"
    return authorized && LoopbackHost.isAllowed(request.url)
  }
}
