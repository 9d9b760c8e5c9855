import Foundation
import UAFCore

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

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
public final class BackendClient: @unchecked Sendable {
  public let base: URL
  let timeout: Double
  let session: URLSession

  public init(server: String, timeout: Double = 60) throws(ConfigurationError) {
    guard let url = URL(string: server.hasSuffix("/") ? String(server.dropLast()) : server),
      let scheme = url.scheme, let host = url.host
    else { throw .invalidServer(server) }
    guard scheme == "https" || (scheme == "http" && Self.isLoopback(host)) else { throw .insecureServer(server) }
    base = url
    self.timeout = timeout
    let cfg = URLSessionConfiguration.ephemeral
    cfg.timeoutIntervalForRequest = timeout
    cfg.timeoutIntervalForResource = timeout
    session = URLSession(configuration: cfg, delegate: RedirectRule(), delegateQueue: nil)
  }

  /// The origin (`scheme://host[:port]`): the default facet ID.
  public var origin: String {
    var s = "\(base.scheme!)://\(base.host!)"
    if let p = base.port { s += ":\(p)" }
    return s
  }

  public static func isLoopback(_ host: String) -> Bool {
    host == "localhost" || host == "::1" || host == "[::1]" || host.hasPrefix("127.")
  }

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
  public func sendResponse(_ op: UAFOperation, _ message: String) throws(BackendError) {
    let answer: ServerResponse = try post(Self.path(op, request: false), SendUAFResponse(uafResponse: message))
    guard answer.statusCode == UAFStatus.ok else {
      throw .uafStatus(answer.statusCode, description: answer.description)
    }
  }

  /// GET the trusted-facets list of an appID (redirects only with FIDO-AppID-Redirect-Authorized: true).
  public func trustedFacets(_ url: URL) throws -> TrustedFacetsList {
    var req = URLRequest(url: url)
    req.setValue("application/fido.trusted-apps+json", forHTTPHeaderField: "Accept")
    let (data, response) = try exchange(req)
    guard (200..<300).contains(response.statusCode) else { throw BackendError.http(response.statusCode) }
    do { return try JSONDecoder().decode(TrustedFacetsList.self, from: data) } catch {
      throw BackendError.malformedAnswer("trusted facets list")
    }
  }

  func post<B: Encodable, R: Decodable>(_ path: String, _ body: B) throws(BackendError) -> R {
    try post(url: base.appendingPathComponent(path), body, contentType: "application/fido+uaf;charset=UTF-8")
  }

  func post<B: Encodable, R: Decodable>(url: URL, _ body: B, contentType: String) throws(BackendError) -> R {
    var req = URLRequest(url: url)
    req.httpMethod = "POST"
    req.setValue(contentType, forHTTPHeaderField: "Content-Type")
    req.setValue("application/fido+uaf", forHTTPHeaderField: "Accept")
    req.httpBody = try? JSONEncoder().encode(body)
    let (data, response) = try exchange(req)
    guard (200..<300).contains(response.statusCode) else { throw .http(response.statusCode) }
    guard data.count <= UAFMessageCodec.maxSize else { throw .malformedAnswer("answer over 1 MiB") }
    do { return try JSONDecoder().decode(R.self, from: data) } catch {
      throw .malformedAnswer("\(R.self) expected")
    }
  }

  /// One request, synchronously, with the configured timeout.
  func exchange(_ request: URLRequest) throws(BackendError) -> (Data, HTTPURLResponse) {
    let done = DispatchSemaphore(value: 0)
    nonisolated(unsafe) var result: (Data?, URLResponse?, Error?) = (nil, nil, nil)
    let task = session.dataTask(with: request) { d, r, e in
      result = (d, r, e)
      done.signal()
    }
    task.resume()
    if done.wait(timeout: .now() + timeout + 1) == .timedOut {
      task.cancel()
      throw .timedOut(request.url?.absoluteString ?? "")
    }
    if let e = result.2 as? URLError {
      if e.code == .timedOut { throw .timedOut(request.url?.absoluteString ?? "") }
      throw .unreachable("\(request.url?.host ?? ""): \(e.localizedDescription)")
    }
    if let e = result.2 { throw .unreachable("\(e)") }
    guard let http = result.1 as? HTTPURLResponse else { throw .malformedAnswer("not HTTP") }
    return (result.0 ?? Data(), http)
  }
}

/// Redirects are followed only when the answer carries `FIDO-AppID-Redirect-Authorized: true`
/// (UAF AppID and Facet Specification §3.1.2), for every request this client makes.
final class RedirectRule: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
  func urlSession(
    _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
    newRequest request: URLRequest, completionHandler: @escaping (URLRequest?) -> Void
  ) {
    let authorized = response.value(forHTTPHeaderField: "FIDO-AppID-Redirect-Authorized")?.lowercased() == "true"
    let secure = request.url?.scheme == "https" || request.url.flatMap { $0.host }.map(BackendClient.isLoopback) == true
    completionHandler(authorized && secure ? request : nil)
  }
}
