import CHTTP
import FoundationEssentials
import Glibc
import Platform
import TokenDevices

/// One HTTP request at a time, synchronously, with a cap on the answer's body: the body is read in chunks as
/// they arrive and the transfer is stopped as soon as it passes the cap (or before it starts, when
/// Content-Length already says so), so memory stays bounded whatever a server sends. Every request of
/// `BackendClient` goes through here; redirects are decided by `allowRedirect`.
///
/// The transport is libcurl, loaded at the first request (`CHTTP`): a command that sends none maps no HTTP or
/// TLS library, and the binary does not carry Foundation's URLSession (FoundationNetworking links libcurl and
/// ~30 libraries at start-up). TLS verifies the server's certificate and host name against the system trust
/// store; libcurl follows no redirect itself.
final class CappedExchange: Sendable {
  enum Outcome {
    case answer(Data, HTTPResponse)
    case tooLarge
    /// libcurl's message.
    case failed(String)
    case deadlinePassed
    /// The answer's header block passed `headerLimit`: not an HTTP answer we read.
    case headersTooLarge
    /// libcurl cannot be loaded; why.
    case noLibrary(String)
  }

  /// Redirects followed per request, at most.
  static let maxRedirects = 5
  /// Largest header block read (all header lines of one answer).
  static let headerLimit = 64 << 10

  private let allowRedirect: @Sendable (HTTPResponse, HTTPRequest) -> Bool

  init(allowRedirect: @escaping @Sendable (HTTPResponse, HTTPRequest) -> Bool) {
    self.allowRedirect = allowRedirect
  }

  /// Runs `request`, following the redirects `allowRedirect` accepts; all of it within `timeout` seconds. A
  /// redirect that is not followed is the answer.
  func run(_ request: HTTPRequest, limit: Int, timeout: Double) -> Outcome {
    let deadline = ContinuousClock.now + .milliseconds(Int64(timeout * 1000))
    var current = request
    var redirects = 0
    while true {
      let left = ContinuousClock.now.duration(to: deadline)
      guard left > .zero else { return .deadlinePassed }
      let outcome = once(current, limit: limit, timeoutMilliseconds: max(1, milliseconds(left)))
      guard case .answer(_, let response) = outcome, redirects < Self.maxRedirects,
        let next = Self.redirect(of: current, by: response), allowRedirect(response, next)
      else { return outcome }
      current = next
      redirects += 1
    }
  }

  /// The request a 301/302/303/307/308 answer with a Location leads to: 303 (and 301/302 after a POST, as
  /// browsers do) becomes a GET without body; 307/308 repeat the request.
  static func redirect(of request: HTTPRequest, by response: HTTPResponse) -> HTTPRequest? {
    guard [301, 302, 303, 307, 308].contains(response.statusCode),
      let location = response.value(forHTTPHeaderField: "Location"),
      let target = URL(string: location, relativeTo: request.url)?.absoluteURL
    else { return nil }
    var next = request
    next.url = target
    if response.statusCode == 303 || (request.httpMethod == "POST" && response.statusCode < 303) {
      next.httpMethod = "GET"
      next.httpBody = nil
      next.setValue(nil, forHTTPHeaderField: "Content-Type")
    }
    return next
  }

  private func milliseconds(_ d: Duration) -> Int {
    let (s, atto) = d.components
    return Int(s) * 1000 + Int(atto / 1_000_000_000_000_000)
  }

  /// What the libcurl callbacks fill, reached through their context pointer.
  private final class Transfer {
    let limit: Int
    var body = Data()
    var headers: [(name: String, value: String)] = []
    var headerBytes = 0
    var tooLarge = false
    var headersTooLarge = false

    init(limit: Int) { self.limit = limit }
  }

  private func once(_ request: HTTPRequest, limit: Int, timeoutMilliseconds: Int) -> Outcome {
    let transfer = Transfer(limit: limit)
    let lines = request.headerFields.map { "\($0.name): \($0.value)" }
    var result = tb_http_result()
    let code = withCStrings(lines) { headerPointers in
      request.url.absoluteString.withCString { url in
        request.httpMethod.withCString { method in
          withBody(request.httpBody) { body, bodyLength in
            var spec = tb_http_request(
              url: url, method: method, headers: headerPointers.baseAddress, header_count: lines.count, body: body,
              body_length: bodyLength, timeout_ms: timeoutMilliseconds, max_body: Int64(limit))
            return tb_http_perform(
              &spec, Self.onHeader, Self.onBody, Unmanaged.passUnretained(transfer).toOpaque(), &result)
          }
        }
      }
    }
    let message = withUnsafeBytes(of: result.error) { raw in
      String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
    }
    if transfer.tooLarge { return .tooLarge }
    if transfer.headersTooLarge { return .headersTooLarge }
    switch Int(code) {
    case Int(TB_HTTP_OK):
      return .answer(
        transfer.body, HTTPResponse(url: request.url, statusCode: result.status, headerFields: transfer.headers))
    case Int(TB_HTTP_NO_LIBRARY): return .noLibrary(message)
    default:
      switch Int(result.curl_code) {
      case Int(TB_CURLE_OPERATION_TIMEDOUT): return .deadlinePassed
      case Int(TB_CURLE_FILESIZE_EXCEEDED): return .tooLarge
      default: return .failed(message)
      }
    }
  }

  private static let onHeader: tb_http_header_sink = { context, line, length in
    let t = Unmanaged<Transfer>.fromOpaque(context!).takeUnretainedValue()
    t.headerBytes += length
    if t.headerBytes > CappedExchange.headerLimit {
      t.headersTooLarge = true
      return 1
    }
    let text = String(decoding: UnsafeRawBufferPointer(start: line, count: length), as: UTF8.self)
    if text.hasPrefix("HTTP/") {
      t.headers = []  // a new answer (after a 100 Continue or a proxy's CONNECT answer): only the last counts
    } else if let colon = text.firstIndex(of: ":") {
      let name = Trim.whitespace(text[..<colon], newlines: false)
      let value = Trim.whitespace(text[text.index(after: colon)...])
      t.headers.append((name, value))
    }
    return 0
  }

  private static let onBody: tb_http_body_sink = { context, data, length in
    let t = Unmanaged<Transfer>.fromOpaque(context!).takeUnretainedValue()
    if t.body.count + length > t.limit {
      t.tooLarge = true
      t.body = Data()
      return 1
    }
    if let data, length > 0 { t.body.append(UnsafeRawPointer(data).assumingMemoryBound(to: UInt8.self), count: length) }
    return 0
  }
}

/// Calls `body` with NUL-terminated copies of `strings` (valid only inside it).
private func withCStrings<R>(_ strings: [String], _ body: (UnsafeBufferPointer<UnsafePointer<CChar>?>) -> R) -> R {
  let copies = strings.map { strdup($0) }
  defer { copies.forEach { free($0) } }
  return copies.map { UnsafePointer($0) }.withUnsafeBufferPointer(body)
}

private func withBody<R>(_ data: Data?, _ body: (UnsafeRawPointer?, Int) -> R) -> R {
  guard let data else { return body(nil, 0) }
  return data.withUnsafeBytes { raw in body(raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1), raw.count) }
}
