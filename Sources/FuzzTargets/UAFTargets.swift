import Foundation
import UAFCore

/// UAF TLV and the two assertions (what a server or a token adapter hands us as UAFV1TLV).
enum UAFTLVTarget {
  static func run(_ data: [UInt8]) {
    // Round trip: parsed elements re-encode to exactly the input, children to exactly their parent's value.
    if let elements = try? UAFTLV.parse(data) {
      check(elements.flatMap(\.encoded) == data, "UAF TLV re-encoding differs from the input")
      var stack = elements
      while let e = stack.popLast() {
        if UAFTag.isComposite(e.tag) {
          check(e.children.flatMap(\.encoded) == e.value, "composite 0x\(String(e.tag, radix: 16)) children differ")
        } else {
          check(e.children.isEmpty, "a simple element has children")
        }
        stack += e.children
      }
    }
    if let reg = try? RegistrationAssertion(parsing: data) {
      check(isValidAAID(reg.aaid), "registration assertion with an invalid AAID")
      check(!reg.keyID.isEmpty, "registration assertion with an empty KeyID")
      check((try? UAFTLV.parseSingle(reg.signedBytes, expecting: UAFTag.krd)) != nil, "KRD does not re-parse")
    }
    if let auth = try? AuthenticationAssertion(parsing: data) {
      check(isValidAAID(auth.aaid) && auth.nonce.count >= 8, "authentication assertion fields out of bounds")
      // Reassembled from what was parsed, the assertion parses to the same value.
      let again = AuthenticationAssertion.assemble(signedData: auth.signedBytes, signature: auth.signature)
      check((try? AuthenticationAssertion(parsing: again)) == auth, "authentication assertion does not round-trip")
    }
  }
}

/// UAF JSON request messages, fcParams, base64url and the sanitizer for untrusted text. The first byte picks the
/// entry point; the rest is the input.
enum UAFJSONTarget {
  static func run(_ data: [UInt8]) {
    guard let selector = data.first else { return }
    let body = Array(data.dropFirst())
    switch selector % 4 {
    case 0:
      let expecting: UAFOperation? = [nil, .reg, .auth, .dereg][Int(selector >> 2) % 4]
      if let request = try? UAFMessageCodec.decodeRequest(bytes: body, expecting: expecting) {
        if let expecting { check(request.header.op == expecting, "a request of another operation was accepted") }
        check(Version.supported.contains(request.header.upv), "an unsupported version was accepted")
      }
    case 1:
      let text = String(decoding: body, as: UTF8.self)
      if let fc = FinalChallengeParams.decode(text) {
        check(FinalChallengeParams.decode(fc.encoded()) == fc, "fcParams do not round-trip")
      }
    case 2:
      // decode(encode(x)) == x, and whatever decodes re-encodes to the canonical (unpadded) text.
      check(Base64URL.decode(Base64URL.encode(body)) == body, "base64url does not round-trip")
      let text = String(decoding: body, as: UTF8.self)
      if let decoded = Base64URL.decode(text) {
        check(
          Base64URL.encode(decoded) == text.replacingOccurrences(of: "=", with: "") || decodedAllowsNonCanonical(text),
          "base64url decoded text that is no encoding")
      }
    default:
      let text = String(decoding: body, as: UTF8.self)
      for layout in [UntrustedText.Layout.singleLine, .multiLine] {
        let shown = UntrustedText.displayable(text, layout: layout)
        for s in shown.unicodeScalars {
          check(!UntrustedText.needsEscape(s, layout), "U+\(String(s.value, radix: 16)) reached the terminal")
          check(!(0x00...0x08).contains(s.value) && !(0x0B...0x1F).contains(s.value), "C0 control in the output")
          check(!(0x7F...0x9F).contains(s.value), "DEL or C1 control in the output")
          check(
            ![0x061C, 0x200E, 0x200F].contains(s.value) && !(0x202A...0x202E).contains(s.value)
              && !(0x2066...0x2069).contains(s.value), "bidi control in the output")
          if layout == .singleLine { check(s.value != 0x0A && s.value != 0x09, "newline or tab in one line") }
        }
        check(unescape(shown) == text, "the sanitizer's output is not reversible")
      }
    }
  }

  /// base64 tolerates non-zero unused bits in the last character (RFC 4648 §3.5 says a decoder MAY reject
  /// them); such text decodes but is not what an encoder writes.
  static func decodedAllowsNonCanonical(_ text: String) -> Bool {
    let n = text.replacingOccurrences(of: "=", with: "").utf8.count
    return n % 4 != 0
  }

  /// The inverse of `UntrustedText.displayable`: `\\` and `\u{HEX}` back to what they stand for.
  static func unescape(_ s: String) -> String? {
    var out = String.UnicodeScalarView()
    var it = Array(s.unicodeScalars)[...]
    while let c = it.popFirst() {
      guard c == "\\" else {
        out.append(c)
        continue
      }
      guard let next = it.popFirst() else { return nil }
      if next == "\\" {
        out.append("\\")
        continue
      }
      guard next == "u", it.popFirst() == "{", let close = it.firstIndex(of: "}") else { return nil }
      guard let v = UInt32(String(String.UnicodeScalarView(it[..<close])), radix: 16), let scalar = Unicode.Scalar(v)
      else { return nil }
      out.append(scalar)
      it = it[(close + 1)...]
    }
    return String(out)
  }
}
