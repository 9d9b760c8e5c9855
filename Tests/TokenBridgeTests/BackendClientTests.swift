import Foundation
import Testing

@testable import TokenBridge

/// The plain-http loopback rule of the backend client (host parsing, redirects); no network.
@Suite struct BackendClientTests {
  static let loopback = [
    "127.0.0.1", "127.0.0.2", "127.255.255.255", "127.1.2.3", "localhost", "LOCALHOST", "LocalHost", "::1", "[::1]",
    "0:0:0:0:0:0:0:1", "[0:0:0:0:0:0:0:1]",
  ]
  static let notLoopback = [
    "127.evil.example", "127.0.0.1.nip.io", "127.0.0.1.", "127.", "127", "127.1", "127.0.1", "127.0.0.1.1",
    "0x7f.0.0.1", "0x7f000001", "2130706433", "0177.0.0.1", "127.0.0.01", "127.000.000.001", "127.0.0.256",
    "127.0.0.-1", " 127.0.0.1", "127.0.0.1 ", "128.0.0.1", "126.255.255.255", "0.0.0.0", "10.0.0.1",
    "localhost.", "localhost.evil.example", "evil.localhost", "localhost:80", "::", "[::]", "::2",
    "::ffff:127.0.0.1", "[::ffff:127.0.0.1]", "::127.0.0.1", "fe80::1", "[::1", "::1]", "[[::1]]", "",
    "127.0.0.1%2eevil.example", "127%2E0%2E0%2E1", "xn--127-0.0.1", "127.0.0.1\u{0}.evil.example",
    "１２７.０.０.１",
  ]

  @Test(arguments: loopback) func loopbackHosts(_ host: String) {
    #expect(BackendClient.isLoopback(host))
  }

  @Test(arguments: notLoopback) func notLoopbackHosts(_ host: String) {
    #expect(!BackendClient.isLoopback(host))
  }

  @Test(arguments: [
    "http://127.0.0.1:8080", "http://127.0.0.1", "http://127.2.3.4:1/base", "http://localhost:9", "http://LOCALHOST",
    "http://[::1]:8443", "https://fido.example.com", "https://127.evil.example", "HTTP://127.0.0.1:1",
  ])
  func serversAccepted(_ server: String) throws {
    #expect(try BackendClient(server: server).base.host != nil)
  }

  @Test(arguments: [
    "http://127.evil.example", "http://127.0.0.1.nip.io:8080", "http://127.1", "http://0x7f.0.0.1",
    "http://2130706433", "http://localhost.", "http://localhost.:80", "http://[::ffff:127.0.0.1]",
    "http://fido.example.com", "http://127.0.0.1@evil.example", "ftp://127.0.0.1", "http://evil.localhost",
  ])
  func serversRefused(_ server: String) {
    #expect(throws: ConfigurationError.insecureServer(server)) { try BackendClient(server: server) }
  }

  @Test func facetsOfAnInsecureURLAreNotFetched() throws {
    let client = try BackendClient(server: "http://127.0.0.1:1", timeout: 5)
    let url = try #require(URL(string: "http://127.evil.example/facets"))
    #expect(throws: BackendError.insecureURL("http://127.evil.example/facets")) { try client.trustedFacets(url) }
  }

  @Test(arguments: [
    ("true", "https://other.example/facets", true), ("TRUE", "http://127.0.0.1:9/facets", true),
    ("true", "http://[::1]:9/facets", true), ("true", "http://localhost/facets", true),
    ("true", "http://127.evil.example/facets", false), ("true", "http://127.0.0.1.nip.io/facets", false),
    ("true", "http://localhost./facets", false), ("true", "file:///etc/passwd", false),
    ("false", "https://other.example/facets", false), (nil, "https://other.example/facets", false),
  ])
  func redirects(_ authorized: String?, _ target: String, _ followed: Bool) throws {
    let from = try #require(URL(string: "https://rp.example/facets"))
    let headers = authorized.map { ["FIDO-AppID-Redirect-Authorized": $0] } ?? [:]
    let response = HTTPResponse(url: from, statusCode: 302, headerFields: headers.map { ($0.key, $0.value) })
    let request = HTTPRequest(url: try #require(URL(string: target)))
    #expect(RedirectRule.allows(response, request) == followed)
  }
}

/// Where a redirect leads (`CappedExchange.redirect`): libcurl follows none itself, so the method, body and
/// target of the next request are ours; whether it is followed at all is `RedirectRule`'s.
@Suite struct RedirectTargetTests {
  func post(_ url: String) throws -> HTTPRequest {
    var r = HTTPRequest(url: try #require(URL(string: url)))
    r.httpMethod = "POST"
    r.httpBody = Data("{}".utf8)
    r.setValue("application/json", forHTTPHeaderField: "Content-Type")
    r.setValue("application/fido+uaf", forHTTPHeaderField: "Accept")
    return r
  }

  func answer(_ status: Int, location: String?) throws -> HTTPResponse {
    HTTPResponse(
      url: try #require(URL(string: "https://rp.example/a/b")), statusCode: status,
      headerFields: location.map { [("location", $0)] } ?? [])
  }

  @Test(arguments: [301, 302, 303]) func postBecomesGetWithoutBody(_ status: Int) throws {
    let next = try #require(
      CappedExchange.redirect(of: try post("https://rp.example/a/b"), by: try answer(status, location: "../c?x=1")))
    #expect(next.url.absoluteString == "https://rp.example/c?x=1")
    #expect(next.httpMethod == "GET" && next.httpBody == nil)
    #expect(next.value(forHTTPHeaderField: "Content-Type") == nil)
    #expect(next.value(forHTTPHeaderField: "accept") == "application/fido+uaf")
  }

  @Test(arguments: [307, 308]) func postIsRepeated(_ status: Int) throws {
    let next = try #require(
      CappedExchange.redirect(
        of: try post("https://rp.example/a/b"), by: try answer(status, location: "https://other.example/x")))
    #expect(next.url.absoluteString == "https://other.example/x")
    #expect(next.httpMethod == "POST" && next.httpBody == Data("{}".utf8))
  }

  @Test(
    arguments: [(200, "https://other.example/x"), (304, "https://other.example/x"), (302, nil)] as [(Int, String?)])
  func noRedirect(_ status: Int, _ location: String?) throws {
    #expect(
      CappedExchange.redirect(of: try post("https://rp.example/a"), by: try answer(status, location: location)) == nil)
  }
}
