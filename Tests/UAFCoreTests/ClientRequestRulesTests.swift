import Foundation
import Testing
import UAFCore

/// The rules FIDO UAF Protocol v1.1 puts on the requests a client processes, one test per rule, each naming its
/// clause. Every refusal here happens while the message is decoded, before a token or a person is asked.
@Suite struct ClientRequestRulesTests {
  func invalid(_ field: String, _ rule: UAFFieldRule) -> UAFMessageError {
    .invalidField(request: 0, field: field, rule: rule)
  }
  let alg: [String: Any] = ["authenticationAlgorithms": [2], "assertionSchemes": ["UAFV1TLV"]]

  // MARK: Policy (§3.1.12)

  /// §3.1.12: "accepted … This list MUST NOT be empty"; nor may a set inside it be (§3 notation: lists are not
  /// empty unless stated otherwise). An empty `disallowed`, when present, is refused the same way.
  @Test func acceptedMustNotBeEmpty() {
    #expect(throws: invalid("policy.accepted", .notEmpty)) {
      try Msg.decode(Msg.reg(policy: ["accepted": [[Any]]()]))
    }
    #expect(throws: invalid("policy.accepted[1]", .notEmpty)) {
      try Msg.decode(Msg.auth(policy: ["accepted": [[["aaid": ["7B1D#0001"]]], [Any]()]]))
    }
    #expect(throws: invalid("policy.disallowed", .notEmpty)) {
      try Msg.decode(Msg.reg(policy: ["accepted": [[["aaid": ["7B1D#0001"]]]], "disallowed": [Any]()]))
    }
  }

  /// §3.1.12: the server decides what is acceptable; a policy accepting nothing never matches (defence in depth
  /// behind the decoding rule above: `PolicyMatcher` is public API).
  @Test func anEmptyAcceptedListMatchesNothing() {
    let piv = AuthenticatorDescription(aaid: "7B1D#0001", description: "PIV")
    #expect(PolicyMatcher.match(Policy(accepted: []), [piv]).accepted.isEmpty)
    #expect(PolicyMatcher.refusal(Policy(accepted: []), piv)?.isEmpty == false)
    #expect(PolicyMatcher.refusal(Policy(accepted: [[MatchCriteria(aaid: ["7B1D#0001"])]]), piv) == nil)
  }

  /// §3.1.12: "Any authenticator that matches any of MatchCriteria contained in the field disallowed MUST be
  /// excluded … regardless of whether it matches any MatchCriteria present in the accepted list".
  @Test func disallowedWinsOverAccepted() {
    let piv = AuthenticatorDescription(aaid: "7B1D#0001", description: "PIV", keyIDs: [Msg.b64(32)])
    let p = Policy(
      accepted: [[MatchCriteria(aaid: ["7B1D#0001"])]],
      disallowed: [MatchCriteria(aaid: ["7B1D#0001"], keyIDs: [Msg.b64(32)])])
    #expect(PolicyMatcher.refusal(p, piv) != nil)
  }

  // MARK: MatchCriteria (§3.1.11)

  /// §3.1.11: "m.aaid MAY be combined with (one or more of) m.keyIDs, m.attachmentHint, m.authenticatorVersion,
  /// and m.exts, but m.aaid MUST NOT be combined with any other match criteria field."
  @Test(arguments: [
    ("vendorID", #"["7B1D"]"#), ("userVerification", "4"), ("keyProtection", "2"), ("matcherProtection", "4"),
    ("tcDisplay", "1"), ("authenticationAlgorithms", "[2]"), ("assertionSchemes", #"["UAFV1TLV"]"#),
    ("attestationTypes", "[15880]"),
  ])
  func aaidIsNotCombinedWithOtherFields(field: String, json: String) throws {
    let value = try JSONSerialization.jsonObject(with: Data(json.utf8), options: .fragmentsAllowed)
    for policy in [
      ["accepted": [[["aaid": ["7B1D#0001"], field: value]]]],
      ["accepted": [[["aaid": ["7B1D#0001"]]]], "disallowed": [["aaid": ["7B1D#0001"], field: value]]],
    ] {
      let path = policy["disallowed"] == nil ? "policy.accepted[0][0]" : "policy.disallowed[0]"
      #expect(throws: invalid(path, .aaidCombinedWith(field))) { try Msg.decode(Msg.reg(policy: policy)) }
    }
  }

  @Test func aaidMayBeCombinedWithKeyIDsAttachmentVersionAndExts() throws {
    let c: [String: Any] = [
      "aaid": ["7B1D#0001"], "keyIDs": [Msg.b64(32)], "attachmentHint": 2, "authenticatorVersion": 1,
      "exts": [["id": "x", "data": "", "fail_if_unknown": false]],
    ]
    _ = try Msg.decode(Msg.auth(policy: ["accepted": [[c]]]))
  }

  /// §3.1.11: "If m.aaid is not provided - at least m.authenticationAlgorithms and m.assertionSchemes MUST be
  /// provided." A `disallowed` entry breaking it is a protocol error, not a criteria that matches nothing.
  @Test func criteriaWithoutAAIDNeedAlgorithmsAndSchemes() throws {
    for c: [String: Any] in [
      ["userVerification": 4], ["authenticationAlgorithms": [2]], ["assertionSchemes": ["UAFV1TLV"]],
    ] {
      #expect(throws: invalid("policy.accepted[0][0]", .algorithmsAndSchemesRequired)) {
        try Msg.decode(Msg.reg(policy: ["accepted": [[c]]]))
      }
    }
    #expect(throws: invalid("policy.disallowed[0]", .algorithmsAndSchemesRequired)) {
      try Msg.decode(
        Msg.reg(policy: ["accepted": [[["aaid": ["7B1D#0001"]]]], "disallowed": [["keyIDs": [Msg.b64(32)]]]]))
    }
    _ = try Msg.decode(Msg.reg(policy: ["accepted": [[alg.merging(["userVerification": 4]) { a, _ in a }]]]))
    #expect(throws: invalid("policy.accepted[0][0].authenticationAlgorithms", .notEmpty)) {
      try Msg.decode(
        Msg.reg(policy: ["accepted": [[["authenticationAlgorithms": [Int](), "assertionSchemes": ["UAFV1TLV"]]]]]))
    }
  }

  /// §3.1.11 userVerification: "(AuthenticatorInfo.userVerification & mc) != 0" when USER_VERIFY_ALL is in
  /// neither value, else the values must be equal: an authenticator needing PIN and touch (0x405) is not one a
  /// server asking for the PIN alone (0x4) or for PIN and fingerprint (0x406) accepts.
  @Test func userVerificationWithAllNeedsTheSameValue() {
    let both = AuthenticatorDescription(aaid: "7B1D#0002", description: "FIDO2", userVerification: 0x405)
    #expect(PolicyMatcher.mismatches(MatchCriteria(userVerification: 0x405), both).isEmpty)
    #expect(!PolicyMatcher.mismatches(MatchCriteria(userVerification: 0x4), both).isEmpty)
    #expect(!PolicyMatcher.mismatches(MatchCriteria(userVerification: 0x406), both).isEmpty)
    let pin = AuthenticatorDescription(aaid: "7B1D#0001", description: "PIV", userVerification: 0x4)
    #expect(PolicyMatcher.mismatches(MatchCriteria(userVerification: 0x6), pin).isEmpty)
    #expect(!PolicyMatcher.mismatches(MatchCriteria(userVerification: 0x2), pin).isEmpty)
  }

  /// §3.1.11 tcDisplay: "at least one of the bit flags matches".
  @Test func tcDisplayNeedsASharedFlag() {
    let a = AuthenticatorDescription(aaid: "7B1D#0001", description: "PIV", tcDisplay: UAFConstant.tcDisplayAny)
    var c = MatchCriteria()
    c.tcDisplay = 0x1
    #expect(PolicyMatcher.mismatches(c, a).isEmpty)
    c.tcDisplay = 0x8  // hardware display
    #expect(!PolicyMatcher.mismatches(c, a).isEmpty)
  }

  // MARK: Extensions (§3.1.10)

  /// §3.1.10 fail_if_unknown: "A value of true indicates that unknown extensions MUST result in an error"; false:
  /// "MUST be ignored". Checked for every operation, deregistration included, after the fields are well-formed.
  @Test func unknownCriticalExtensionsAreRefused() throws {
    let critical = [["id": "example.critical", "data": "", "fail_if_unknown": true]]
    let ignorable = [["id": "example.optional", "data": Msg.b64(4), "fail_if_unknown": false]]
    #expect(throws: UAFMessageError.unknownExtension(request: 0, id: "example.critical")) {
      try Msg.decode(Msg.reg(header: Msg.header("Reg", exts: critical)))
    }
    #expect(throws: UAFMessageError.unknownExtension(request: 0, id: "example.critical")) {
      try Msg.decode(Msg.auth(header: Msg.header("Auth", exts: critical)))
    }
    #expect(throws: UAFMessageError.unknownExtension(request: 0, id: "example.critical")) {
      try Msg.decode(Msg.dereg([("7B1D#0001", "")], header: Msg.header("Dereg", serverData: nil, exts: critical)))
    }
    _ = try Msg.decode(Msg.reg(header: Msg.header("Reg", exts: ignorable)))
    // A malformed extension is a protocol error first.
    let padded = [["id": "example.critical", "data": "AA==", "fail_if_unknown": true]]
    #expect(throws: invalid("header.exts[0].data", .base64URL(minBytes: 0, maxBytes: nil))) {
      try Msg.decode(Msg.reg(header: Msg.header("Reg", exts: padded)))
    }
  }

  /// §3.1.10: a MatchCriteria extension with fail_if_unknown the authenticator does not know makes that criteria
  /// not match (the authenticator cannot satisfy it).
  @Test func criticalCriteriaExtensionsDoNotMatch() {
    var c = MatchCriteria(aaid: ["7B1D#0001"])
    c.exts = [Extension(id: "example.critical", data: "", failIfUnknown: true)]
    #expect(!PolicyMatcher.mismatches(c, AuthenticatorDescription(aaid: "7B1D#0001", description: "PIV")).isEmpty)
  }

  // MARK: Transaction (§3.5.1)

  func tx(_ content: String, _ type: String = "text/plain", png: Bool = false) -> [[String: Any]] {
    var t: [String: Any] = ["contentType": type, "content": content]
    if png {
      t["tcDisplayPNGCharacteristics"] = [
        "width": 320, "height": 240, "bitDepth": 8, "colorType": 6, "compression": 0, "filter": 0, "interlace": 0,
      ]
    }
    return [t]
  }

  /// §3.5.1 contentType: "This version of the specification only supports the values text/plain or image/png."
  @Test func contentTypeIsTextPlainOrImagePNG() throws {
    for bad in ["text/html", "text/plain; charset=utf-8", "TEXT/PLAIN", "image/jpeg"] {
      #expect(throws: invalid("transaction[0].contentType", .contentType)) {
        try Msg.decode(Msg.auth(transaction: tx(Msg.b64(4), bad)))
      }
    }
  }

  /// §3.5.1 content: base64url(byte[1...]); §3: base64url "without padding".
  @Test func contentIsUnpaddedBase64URL() throws {
    let text = Base64URL.encode(Array("Pay 1".utf8)) + "="  // 5 bytes: one padding character
    #expect(throws: invalid("transaction[0].content", .base64URL(minBytes: 1, maxBytes: nil))) {
      try Msg.decode(Msg.auth(transaction: tx(text)))
    }
    _ = try Msg.decode(Msg.auth(transaction: tx(String(text.dropLast()))))
  }

  /// §3.5.1: text/plain content is text "with a maximum of 200 characters" (characters, not bytes).
  @Test func textPlainIsAtMost200Characters() throws {
    _ = try Msg.decode(Msg.auth(transaction: tx(Base64URL.encode(Array(String(repeating: "é", count: 200).utf8)))))
    #expect(throws: invalid("transaction[0].content", .textLength(max: 200))) {
      try Msg.decode(Msg.auth(transaction: tx(Base64URL.encode(Array(String(repeating: "a", count: 201).utf8)))))
    }
    #expect(throws: invalid("transaction[0].content", .textLength(max: 200))) {
      try Msg.decode(Msg.auth(transaction: tx(Base64URL.encode([0xFF, 0xFE]))))  // not text
    }
  }

  /// §3.5.1 tcDisplayPNGCharacteristics: "MUST be present if the contentType is image/png"; and `transaction`,
  /// when present, holds at least one entry.
  @Test func imagesCarryTheirCharacteristics() throws {
    #expect(throws: invalid("transaction[0].tcDisplayPNGCharacteristics", .pngCharacteristicsRequired)) {
      try Msg.decode(Msg.auth(transaction: tx(Msg.b64(8), "image/png")))
    }
    _ = try Msg.decode(Msg.auth(transaction: tx(Msg.b64(8), "image/png", png: true)))
    #expect(throws: invalid("transaction", .notEmpty)) { try Msg.decode(Msg.auth(transaction: [])) }
  }

  // MARK: Deregistration (§3.6)

  /// §3.6.3: `authenticators` is required, and (§3 notation) not empty: a deregistration naming nothing is
  /// malformed, never a success.
  @Test func deregistrationNamesAtLeastOneAuthenticator() {
    #expect(throws: invalid("authenticators", .notEmpty)) { try Msg.decode(Msg.dereg([])) }
  }

  /// §3.6.4.2 step 4: "Empty string values for o.aaid and o.keyID MUST occur in the first and only
  /// DeregisterAuthenticator object o, otherwise reject the operation".
  @Test func deregisterAllIsTheOnlyEntry() throws {
    let key = Msg.b64(32)
    #expect(throws: invalid("authenticators[1]", .wildcardNotAlone)) {
      try Msg.decode(Msg.dereg([("7B1D#0001", key), ("", "")]))
    }
    #expect(throws: invalid("authenticators[0]", .wildcardNotAlone)) {
      try Msg.decode(Msg.dereg([("", ""), ("7B1D#0001", key)]))
    }
    _ = try Msg.decode(Msg.dereg([("", "")]))
  }

  // MARK: Encodings (§3)

  /// §3: base64url is "without padding": a padded challenge is refused.
  @Test func challengeIsUnpadded() {
    let padded = Base64URL.encode(Array(repeating: 1, count: 32)) + "="
    #expect(throws: invalid("challenge", .base64URL(minBytes: 8, maxBytes: 64))) {
      try Msg.decode(Msg.reg(challenge: padded))
    }
  }

  /// §3: string[n..m] counts characters (the byte length of string[n] is at most 4n): a username of 128
  /// two-byte characters is valid, 129 characters are not.
  @Test func lengthsCountCharacters() throws {
    _ = try Msg.decode(Msg.reg(username: String(repeating: "é", count: 128)))
    #expect(throws: invalid("username", .length(min: 1, max: 128))) {
      try Msg.decode(Msg.reg(username: String(repeating: "é", count: 129)))
    }
  }
}
