import Foundation
import Testing
import UAFCore

@testable import TokenBridge

/// Out-of-band payload decoding (backend contract §4) and the x-callback allow-list.
@Suite struct OutOfBandPayloadTests {
  func encoded(_ object: [String: Any]) -> String {
    Base64URL.encode(Array(try! JSONSerialization.data(withJSONObject: object)))
  }

  let plain: [String: Any] = [
    "nma_data": ["token": "t-1", "redeem_url": "https://fido.example/nevisfido/token/redeem/authentication"],
    "nma_data_content_type": "application/json", "nma_data_version": "1",
  ]

  @Test func theThreeFormsDecodeToTheSamePayload() throws {
    let q = try OutOfBandPayload(.qrText(encoded(plain)))
    #expect(q.token == "t-1" && q.operation == .auth && q.serverOrigin == "https://fido.example")
    let l = try OutOfBandPayload(.link("https://app.example/x?dispatchTokenResponse=\(encoded(plain))"))
    #expect(l == q)
    let p = try OutOfBandPayload(.push(Array(try JSONSerialization.data(withJSONObject: plain))))
    #expect(p == q)
    let cb = try OutOfBandPayload(
      .link(
        "tokenbridge://x-callback-url/oob?dispatchTokenResponse=\(encoded(plain))&x-success=app://ok&x-cancel=app://no")
    )
    #expect(cb.callback == XCallback(success: "app://ok", error: nil, cancel: "app://no"))
  }

  @Test func badPayloadsAreTypedErrors() {
    #expect(throws: OutOfBandError.malformedPayload(reason: "the QR text is not base64url")) {
      try OutOfBandPayload(.qrText("a+b/"))
    }
    #expect(throws: OutOfBandError.decryptionError) {
      try OutOfBandPayload(.qrText(encoded(["nma_data": "x.y.z", "nma_data_content_type": "application/jose"])))
    }
    #expect(throws: OutOfBandError.malformedPayload(reason: "a custom-scheme link must be an x-callback-url")) {
      try OutOfBandPayload(.link("myapp://open?dispatchTokenResponse=\(encoded(plain))"))
    }
    #expect(throws: OutOfBandError.insecureRedeemURL("http://127.evil.example/nevisfido/token/redeem/registration")) {
      try OutOfBandPayload(
        .qrText(
          encoded([
            "nma_data": ["token": "t", "redeem_url": "http://127.evil.example/nevisfido/token/redeem/registration"]
          ])))
    }
    // Found by the oob-payload fuzz target: an empty host was taken, and the server origin was `https://`.
    for redeem in [
      "https://@/x/redeem/registration", "https:///x/redeem/registration", "https://:443/redeem/registration",
    ] {
      #expect(throws: OutOfBandError.malformedPayload(reason: "nma_data.redeem_url is missing or not a URL")) {
        try OutOfBandPayload(
          .push(Array(try JSONSerialization.data(withJSONObject: ["nma_data": ["token": "t", "redeem_url": redeem]]))))
      }
    }
  }

  @Test func callbacksOnlyToListedSchemesAndOrigins() {
    let policy = CallbackPolicy(allowed: ["bankapp:", "https://bank.example"])
    #expect(policy.allows("bankapp://done?x=1") && policy.allows("https://bank.example/after"))
    for refused in [
      "https://bank.example:8443/x", "https://evil.example/", "http://bank.example/", "javascript:alert(1)",
      "file:///etc/passwd", "otherapp://x", "not a url",
    ] {
      #expect(!policy.allows(refused), "\(refused)")
    }
    #expect(!CallbackPolicy(allowed: ["javascript:"]).allows("javascript:alert(1)"))
  }

  /// Targets a browser (WHATWG URL) reads as another host than Foundation does, or that the two could read
  /// differently: never opened with `https://bank.example` on the list.
  static let hostileTargets = [
    #"https://evil.example\@bank.example/"#, #"https://evil.example\\@bank.example/"#,
    #"https://evil.example:\@bank.example/"#, #"https://evil.example:443\@bank.example/"#,
    #"https:\\evil.example\@bank.example/"#, #"https:/\evil.example\@bank.example/"#,
    #"HTTPS://EVIL.EXAMPLE\@BANK.EXAMPLE/"#, "https://evil.example\t\\@bank.example/",
    "https://evil.example\n\\@bank.example/", " https://evil.example\\@bank.example/",
    "https://evil.example\\@bank.example/ ", #"https://e%76il.example\@bank.example/"#,
    "https://evil.example%5C@bank.example/", "https://evil.example%2F@bank.example/",
    "https://bank.example@evil.example/", "https://bank.example:@evil.example/", "https://bank.example%40evil.example/",
    "https://bank%2eexample/", "https://ｂａｎｋ.example/", "https://bank.example\u{3002}/", "https:bank.example/",
    "https:/bank.example/", "https:///bank.example/", "https://bank.example\u{0}/", "https://bank.example\u{7F}/",
    #"https://0x7f.1\@bank.example/"#, "https://bank.example:99999/", "https://bank.example:-1/",
    "javascript:alert(1)//https://bank.example", "tokenbridge://x-callback-url/oob", "",
  ]

  @Test func callbacksFollowTheBrowsersReadingAndOpenTheCheckedSerialization() {
    let policy = CallbackPolicy(allowed: [
      "bankapp:", "https://bank.example", "https://127.0.0.1:8443", "https://[::1]",
    ])
    for target in Self.hostileTargets { #expect(policy.opened(target) == nil, "\(target)") }
    for (target, opened) in [
      ("https://bank.example/done?x=1#f", "https://bank.example/done?x=1#f"),
      ("https://bank.example", "https://bank.example/"), ("https://BANK.Example:443/p", "https://bank.example/p"),
      ("https://bank.example:0443?q", "https://bank.example/?q"), ("https://bank.example:/a", "https://bank.example/a"),
      ("BankApp://done", "bankapp://done"), ("https://0x7f.0.0.1:8443/x", "https://127.0.0.1:8443/x"),
      ("https://2130706433:8443/", "https://127.0.0.1:8443/"), ("https://[0:0::1]/cb", "https://[::1]/cb"),
    ] {
      #expect(policy.opened(target) == opened, "\(target)")
    }
    #expect(CallbackURL.ipv6("1:0:0:2:0:0:0:3") == "[1:0:0:2::3]" && CallbackURL.ipv6("::") == "[::]")
    #expect(CallbackURL.ipv6("1::") == "[1::]" && CallbackURL.ipv6("::ffff:1.2.3.4") == "[::ffff:102:304]")
    #expect(CallbackURL.ipv4(["1", "2", "3", "256"]) == nil && CallbackURL.ipv4(["0x100", "1"]) == nil)
    #expect(CallbackURL.ipv4(["010", "0x10", "65535"]) == "8.16.255.255")
    // The allow-list entries are read by the same rule.
    for entry in ["https://bank.example/x", "https://u@bank.example", "http:", "https:", "tokenbridge:", #"a\b:"#] {
      #expect(CallbackURL.allowListEntry(entry) == nil, "\(entry)")
    }
    #expect(CallbackURL.allowListEntry("HTTPS://Bank.Example:443/") == "https://bank.example")
  }

  @Test func theContentTypeIsTheMediaTypeItselfWithParameters() throws {
    for (value, type) in [
      ("application/jose", "application/jose"), ("Application/JOSE", "application/jose"),
      ("application/jose; charset=utf-8", "application/jose"), (#"application/jose ;x="a;\"b""#, "application/jose"),
      (" application/json ", "application/json"), ("application/json;;", "application/json"),
    ] {
      #expect(OutOfBandPayload.mediaType(value) == type, "\(value)")
    }
    for value in ["application/josefoo", "application/jose+json", "application/jsonx"] {
      #expect(OutOfBandPayload.mediaType(value) == value, "\(value)")
    }
    for value in [
      "application/jose x", "application/jose;x", #"application/jose;x="a"#, "application /jose",
      "application", "/jose", "application/jose\u{0}", "application/jose,application/json",
    ] {
      #expect(OutOfBandPayload.mediaType(value) == nil, "\(value)")
    }
    let jose: [String: Any] = ["nma_data": ["token": "t"], "nma_data_content_type": "application/josefoo"]
    #expect(
      throws: OutOfBandError.malformedPayload(
        reason: "nma_data_content_type is neither application/json nor application/jose")
    ) { try OutOfBandPayload(json: Array(try JSONSerialization.data(withJSONObject: jose))) }
    var json = plain
    json["nma_data_content_type"] = "application/jsonx"
    #expect(
      throws: OutOfBandError.malformedPayload(
        reason: "nma_data_content_type is neither application/json nor application/jose")
    ) { try OutOfBandPayload(json: Array(try JSONSerialization.data(withJSONObject: json))) }
    json["nma_data_content_type"] = "application/json; charset=utf-8"
    // A media type with parameters (RFC 7231) is still application/json: the payload reads as the plain one.
    let withCharset = try OutOfBandPayload(json: Array(try JSONSerialization.data(withJSONObject: json)))
    #expect(withCharset.token == "t-1" && !withCharset.encrypted)
    #expect(withCharset.redeemURL.absoluteString == "https://fido.example/nevisfido/token/redeem/authentication")
  }
}
