import FoundationEssentials
import Platform
import TokenDevices
import UAFCore

/// Why an out-of-band payload or its operation could not be used (the mobile SDKs' error kinds).
public enum OutOfBandError: Error, Equatable, Sendable {
  /// Not a payload this client understands; `reason` names what is wrong (our words, no payload text).
  case malformedPayload(reason: String)
  /// Encrypted (`application/jose`) for a key this client does not hold.
  case decryptionError
  /// The server no longer knows the token (expired or unknown).
  case tokenExpired
  /// The token was redeemed already.
  case alreadyRedeemed
  /// The redeem URL is not https (or http on loopback).
  case insecureRedeemURL(String)
  /// A QR image (`--qr-image`) gave no payload text.
  case qrImage(QRImageProblem)
}

/// Where a payload came from (the SDK's OutOfBandPayloadDecode inputs).
public enum OutOfBandSource: Sendable, Equatable {
  /// The QR code's text: base64url of the payload JSON.
  case qrText(String)
  /// A link `https://…?dispatchTokenResponse=<base64url JSON>`, or a custom-scheme x-callback-url
  /// `tokenbridge://x-callback-url/…?dispatchTokenResponse=…&x-success=…&x-error=…&x-cancel=…`.
  case link(String)
  /// A push notification's data map: the payload JSON itself.
  case push([UInt8])

  /// What a scanned QR code holds: a link (the `link-png-qr-code` dispatcher) or the base64url payload
  /// (`png-qr-code`).
  public static func scanned(_ text: String) -> OutOfBandSource {
    let t = Trim.whitespace(text)
    return t.firstRange(of: "://") != nil ? .link(t) : .qrText(t)
  }
}

/// An x-callback-url's targets (x-callback-url convention; opened only when allowed, see `CallbackPolicy`).
public struct XCallback: Sendable, Equatable {
  public var success: String?
  public var error: String?
  public var cancel: String?
}

/// A decoded out-of-band payload (backend contract §4): the token to redeem, where, and for which operation.
public struct OutOfBandPayload: Sendable, Equatable {
  public var token: String
  public var redeemURL: URL
  /// The operation the redeem URL names (`…/token/redeem/registration|authentication|deregistration`).
  public var operation: UAFOperation
  /// Free data the dispatcher attached (`nma_data.data`), if any: server text, show it escaped.
  public var data: String?
  public var version: String?
  public var callback: XCallback?
  /// Whether it came encrypted (`application/jose`) and was decrypted with this device's key.
  public var encrypted = false

  /// The largest payload accepted (a QR code holds at most ~3 KB; a push data map is small).
  public static let maxSize = 16 * 1024

  /// The server's origin (`scheme://host[:port]`), the base of the UAF endpoints for the response.
  public var serverOrigin: String {
    var s =
      "\(redeemURL.scheme ?? "https")://\(redeemURL.host.map { $0.contains(":" as Character) ? "[\($0)]" : $0 } ?? "")"
    if let p = redeemURL.port { s += ":\(p)" }
    return s
  }

  /// Decodes a payload; an encrypted one (`application/jose`) only with a `decrypter` holding its key.
  public init(_ source: OutOfBandSource, decrypter: PayloadDecrypter? = nil) throws(OutOfBandError) {
    var callback: XCallback?
    let json: [UInt8]
    switch source {
    case .qrText(let text):
      guard text.utf8.count <= Self.maxSize * 2, let bytes = Base64URL.decode(text) else {
        throw .malformedPayload(reason: "the QR text is not base64url")
      }
      json = bytes
    case .push(let bytes): json = bytes
    case .link(let link):
      guard link.utf8.count <= Self.maxSize * 2, let components = URLComponents(string: link),
        let scheme = components.scheme?.lowercased()
      else { throw .malformedPayload(reason: "the link is not a URL") }
      let items = components.queryItems ?? []
      func item(_ name: String) -> String? { items.first { $0.name == name }?.value }
      guard let encoded = item("dispatchTokenResponse") else {
        throw .malformedPayload(reason: "the link has no dispatchTokenResponse parameter")
      }
      if scheme != "https" {
        guard components.host == "x-callback-url" else {
          throw .malformedPayload(reason: "a custom-scheme link must be an x-callback-url")
        }
        callback = XCallback(success: item("x-success"), error: item("x-error"), cancel: item("x-cancel"))
      }
      guard let bytes = Base64URL.decode(encoded) else {
        throw .malformedPayload(reason: "dispatchTokenResponse is not base64url")
      }
      json = bytes
    }
    try self.init(json: json, decrypter: decrypter)
    self.callback = callback
  }

  /// Parses the payload JSON (`nma_data`, `nma_data_content_type`, `nma_data_version`).
  public init(json: [UInt8], decrypter: PayloadDecrypter? = nil) throws(OutOfBandError) {
    guard json.count <= Self.maxSize else { throw .malformedPayload(reason: "it is larger than \(Self.maxSize) bytes") }
    guard let object = JSONValue.parseObject(json) else {
      throw .malformedPayload(reason: "it is not a JSON object")
    }
    let declared = object["nma_data_content_type"]?.asString ?? "application/json"
    guard let contentType = Self.mediaType(declared) else {
      throw .malformedPayload(reason: "nma_data_content_type is not a media type")
    }
    var data = object["nma_data"]
    if contentType == "application/jose" {
      // nma_data is a compact JWE (PayloadEncryption.swift holds the algorithm choice).
      guard let jwe = data?.asString, jwe.utf8.count <= Self.maxSize else {
        throw .malformedPayload(reason: "an application/jose nma_data must be a compact JWE string")
      }
      guard let decrypter else { throw .decryptionError }
      let plain = try decrypter.decrypt(jwe)
      data = JSONValue.parseObject(plain).map(JSONValue.object)
    } else {
      guard contentType == "application/json" else {
        throw .malformedPayload(reason: "nma_data_content_type is neither application/json nor application/jose")
      }
      if let s = data?.asString {  // nma_data may itself be a JSON string
        data = JSONValue.parseObject(s.utf8).map(JSONValue.object)
      }
    }
    guard let fields = data?.asObject else { throw .malformedPayload(reason: "nma_data is not an object") }
    guard let token = fields["token"]?.asString, !token.isEmpty, token.utf8.count <= 512 else {
      throw .malformedPayload(reason: "nma_data.token is missing or not 1-512 characters")
    }
    // A host, not only an authority: `https://@/…` has an empty one (its server origin would be `https://`).
    guard let redeem = fields["redeem_url"]?.asString, let url = URL(string: redeem), url.host?.isEmpty == false
    else {
      throw .malformedPayload(reason: "nma_data.redeem_url is missing or not a URL")
    }
    guard LoopbackHost.isAllowed(url) else { throw .insecureRedeemURL(redeem) }
    let path = url.path
    let op: UAFOperation
    if path.hasSuffix("/redeem/registration") {
      op = .reg
    } else if path.hasSuffix("/redeem/authentication") {
      op = .auth
    } else if path.hasSuffix("/redeem/deregistration") {
      op = .dereg
    } else {
      throw .malformedPayload(
        reason: "redeem_url does not end in /redeem/registration, authentication or deregistration")
    }
    self.token = token
    self.redeemURL = url
    self.operation = op
    self.data = fields["data"]?.asString
    self.version = object["nma_data_version"]?.asString
    self.callback = nil
    self.encrypted = contentType == "application/jose"
  }

  /// The lowercase `type/subtype` of a media type (RFC 7231 §3.1.1.1: `type "/" subtype *( OWS ";" OWS
  /// parameter )`, a parameter `token "=" ( token / quoted-string )`), surrounding spaces and tabs ignored; nil when
  /// `value` is not one (so `application/josefoo` is `application/josefoo`, not JOSE).
  static func mediaType(_ value: String) -> String? {
    let b = Array(value.utf8)
    func isTChar(_ c: UInt8) -> Bool {
      (c >= 0x30 && c <= 0x39) || (c | 0x20 >= 0x61 && c | 0x20 <= 0x7A) || "!#$%&'*+-.^_`|~".utf8.contains(c)
    }
    func isOWS(_ c: UInt8) -> Bool { c == 0x20 || c == 0x09 }
    var i = 0
    func skipOWS() { while i < b.count, isOWS(b[i]) { i += 1 } }
    func token() -> ArraySlice<UInt8>? {
      let start = i
      while i < b.count, isTChar(b[i]) { i += 1 }
      return i > start ? b[start..<i] : nil
    }
    skipOWS()
    guard let type = token(), i < b.count, b[i] == UInt8(ascii: "/") else { return nil }
    i += 1
    guard let subtype = token() else { return nil }
    while true {
      skipOWS()
      if i == b.count { break }
      guard b[i] == UInt8(ascii: ";") else { return nil }
      i += 1
      skipOWS()
      if i == b.count { break }  // empty parameters (`;;`, a trailing `;`): RFC 9110 §5.6.6 allows them
      if b[i] == UInt8(ascii: ";") { continue }
      guard token() != nil, i < b.count, b[i] == UInt8(ascii: "=") else { return nil }
      i += 1
      if i < b.count, b[i] == UInt8(ascii: "\"") {
        i += 1
        var closed = false
        while i < b.count {
          let c = b[i]
          if c == UInt8(ascii: "\"") {
            closed = true
            i += 1
            break
          }
          if c == UInt8(ascii: "\\") {
            guard i + 1 < b.count, b[i + 1] == 0x09 || b[i + 1] >= 0x20, b[i + 1] != 0x7F else { return nil }
            i += 2
            continue
          }
          guard c == 0x09 || c >= 0x20, c != 0x7F else { return nil }
          i += 1
        }
        guard closed else { return nil }
      } else {
        guard token() != nil else { return nil }
      }
    }
    return String(decoding: type + [UInt8(ascii: "/")] + subtype, as: UTF8.self).lowercased()
  }
}
