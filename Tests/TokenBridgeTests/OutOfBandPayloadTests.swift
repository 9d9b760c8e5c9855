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
}
