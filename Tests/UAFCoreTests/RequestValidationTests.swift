import Foundation
import Testing
import UAFCore

/// Builds UAF request messages with one field changed.
enum Msg {
  static func b64(_ n: Int, _ byte: UInt8 = 7) -> String { Base64URL.encode(Array(repeating: byte, count: n)) }

  static func header(
    _ op: String, major: Any = 1, minor: Any = 1, appID: String? = "https://rp.example.com/facets",
    serverData: String? = "sd", exts: [[String: Any]]? = nil
  ) -> [String: Any] {
    var h: [String: Any] = ["upv": ["major": major, "minor": minor], "op": op]
    if let appID { h["appID"] = appID }
    if let serverData { h["serverData"] = serverData }
    if let exts { h["exts"] = exts }
    return h
  }

  static var policy: [String: Any] { ["accepted": [[["aaid": ["7B1D#0001"]]]]] }

  static func reg(
    challenge: String = b64(32), username: String = "alice", header: [String: Any] = header("Reg"),
    policy: [String: Any] = policy
  ) -> [String: Any] {
    ["header": header, "challenge": challenge, "username": username, "policy": policy]
  }

  static func auth(
    challenge: String = b64(32), transaction: [[String: Any]]? = nil,
    header: [String: Any] = header("Auth"), policy: [String: Any] = policy
  ) -> [String: Any] {
    var r: [String: Any] = ["header": header, "challenge": challenge, "policy": policy]
    if let transaction { r["transaction"] = transaction }
    return r
  }

  static func dereg(_ entries: [(String, String)], header: [String: Any] = header("Dereg", serverData: nil))
    -> [String: Any]
  {
    ["header": header, "authenticators": entries.map { ["aaid": $0.0, "keyID": $0.1] }]
  }

  static func json(_ requests: [[String: Any]]) -> String {
    String(decoding: try! JSONSerialization.data(withJSONObject: requests), as: UTF8.self)
  }

  static func decode(_ requests: [String: Any]..., expecting: UAFOperation? = nil) throws(UAFMessageError)
    -> UAFRequest
  {
    try UAFMessageCodec.decodeRequest(json(requests), expecting: expecting)
  }
}

/// Every field the UAF spec bounds is checked when the request is decoded.
@Suite struct RequestValidationTests {
  func invalid(_ field: String, _ rule: UAFFieldRule, request: Int = 0) -> UAFMessageError {
    .invalidField(request: request, field: field, rule: rule)
  }

  @Test func challengeIsBase64URLOf8To64Bytes() throws {
    let rule = UAFFieldRule.base64URL(minBytes: 8, maxBytes: 64)
    for n in [8, 9, 63, 64] {
      _ = try Msg.decode(Msg.reg(challenge: Msg.b64(n)))
      _ = try Msg.decode(Msg.auth(challenge: Msg.b64(n)))
    }
    for bad in [Msg.b64(0), Msg.b64(7), Msg.b64(65), Msg.b64(1000), "not base64url!", "AAAA+AAAAAAA", "AAAA/AAAAAAA"] {
      #expect(throws: invalid("challenge", rule)) { try Msg.decode(Msg.reg(challenge: bad)) }
      #expect(throws: invalid("challenge", rule)) { try Msg.decode(Msg.auth(challenge: bad)) }
    }
  }

  @Test func usernameIs1To128Characters() throws {
    _ = try Msg.decode(Msg.reg(username: "a"))
    _ = try Msg.decode(Msg.reg(username: String(repeating: "a", count: 128)))
    let rule = UAFFieldRule.length(min: 1, max: 128)
    #expect(throws: invalid("username", rule)) { try Msg.decode(Msg.reg(username: "")) }
    #expect(throws: invalid("username", rule)) {
      try Msg.decode(Msg.reg(username: String(repeating: "a", count: 129)))
    }
  }

  @Test func appIDIsAtMost512AndServerData1To1536Characters() throws {
    let app = "https://" + String(repeating: "a", count: 504)
    _ = try Msg.decode(Msg.reg(header: Msg.header("Reg", appID: app)))
    _ = try Msg.decode(Msg.reg(header: Msg.header("Reg", appID: "")))
    #expect(throws: invalid("header.appID", .length(min: 0, max: 512))) {
      try Msg.decode(Msg.reg(header: Msg.header("Reg", appID: app + "a")))
    }
    _ = try Msg.decode(Msg.reg(header: Msg.header("Reg", serverData: String(repeating: "s", count: 1536))))
    _ = try Msg.decode(Msg.reg(header: Msg.header("Reg", serverData: nil)))
    for bad in ["", String(repeating: "s", count: 1537)] {
      #expect(throws: invalid("header.serverData", .length(min: 1, max: 1536))) {
        try Msg.decode(Msg.auth(header: Msg.header("Auth", serverData: bad)))
      }
    }
  }

  @Test func versionComponentsAreUnsignedShorts() {
    #expect(throws: invalid("header.upv.major", .range(min: 0, max: 65535))) {
      try Msg.decode(Msg.reg(header: Msg.header("Reg", major: -1)))
    }
    #expect(throws: invalid("header.upv.minor", .range(min: 0, max: 65535))) {
      try Msg.decode(Msg.reg(header: Msg.header("Reg", minor: 65536)))
    }
    // In range but not spoken: the old error.
    #expect(throws: UAFMessageError.unsupportedVersion([Version(major: 65535, minor: 0)])) {
      try Msg.decode(Msg.reg(header: Msg.header("Reg", major: 65535, minor: 0)))
    }
  }

  @Test func extensionIDIs1To32Characters() throws {
    func ext(_ id: String, _ data: String = "") -> [[String: Any]] {
      [["id": id, "data": data, "fail_if_unknown": false]]
    }
    _ = try Msg.decode(Msg.reg(header: Msg.header("Reg", exts: ext(String(repeating: "x", count: 32)))))
    #expect(throws: invalid("header.exts[0].id", .length(min: 1, max: 32))) {
      try Msg.decode(Msg.reg(header: Msg.header("Reg", exts: ext(String(repeating: "x", count: 33)))))
    }
    #expect(throws: invalid("header.exts[0].id", .length(min: 1, max: 32))) {
      try Msg.decode(Msg.reg(header: Msg.header("Reg", exts: ext(""))))
    }
    _ = try Msg.decode(Msg.reg(header: Msg.header("Reg", exts: ext("x", String(repeating: "A", count: 10_923)))))
    #expect(throws: invalid("header.exts[0].data", .length(min: 0, max: 10_923))) {
      try Msg.decode(Msg.reg(header: Msg.header("Reg", exts: ext("x", String(repeating: "A", count: 10_924)))))
    }
  }

  @Test func policyAAIDsVendorIDsAndKeyIDsAreChecked() throws {
    func policy(_ c: [String: Any]) -> [String: Any] { ["accepted": [[["aaid": ["7B1D#0001"]], c]]] }
    _ = try Msg.decode(
      Msg.auth(policy: ["accepted": [[["aaid": ["7B1D#0001"], "keyIDs": [Msg.b64(32), Msg.b64(2048)]]]]]))
    #expect(throws: invalid("policy.accepted[0][1].aaid[0]", .aaid)) {
      try Msg.decode(Msg.auth(policy: policy(["aaid": ["7B1D-0001"]])))
    }
    // Fullwidth digits pass Character.isHexDigit; an AAID is ASCII.
    #expect(throws: invalid("policy.accepted[0][1].aaid[0]", .aaid)) {
      try Msg.decode(Msg.auth(policy: policy(["aaid": ["７B1D#0001"]])))
    }
    #expect(throws: invalid("policy.accepted[0][1].vendorID[0]", .vendorID)) {
      try Msg.decode(
        Msg.auth(
          policy: policy(["vendorID": ["7B1"], "authenticationAlgorithms": [2], "assertionSchemes": ["UAFV1TLV"]])))
    }
    for bad in [Msg.b64(31), Msg.b64(2049), "@@@@"] {
      #expect(throws: invalid("policy.accepted[0][1].keyIDs[0]", .base64URL(minBytes: 32, maxBytes: 2048))) {
        try Msg.decode(Msg.auth(policy: policy(["aaid": ["7B1D#0001"], "keyIDs": [bad]])))
      }
    }
    #expect(throws: invalid("policy.disallowed[0].aaid[0]", .aaid)) {
      try Msg.decode(Msg.reg(policy: ["accepted": [[["aaid": ["7B1D#0001"]]]], "disallowed": [["aaid": ["x"]]]]))
    }
  }

  @Test func transactionContentIsBase64URLOfAtLeastOneByte() throws {
    func tx(_ content: String, _ type: String = "text/plain") -> [[String: Any]] {
      [["contentType": type, "content": content]]
    }
    _ = try Msg.decode(Msg.auth(transaction: tx(Msg.b64(1))))
    let rule = UAFFieldRule.base64URL(minBytes: 1, maxBytes: nil)
    for bad in ["", "a+b/", "Pay 10 EUR"] {
      #expect(throws: invalid("transaction[0].content", rule)) { try Msg.decode(Msg.auth(transaction: tx(bad))) }
    }
    #expect(throws: invalid("transaction[0].contentType", .contentType)) {
      try Msg.decode(Msg.auth(transaction: tx(Msg.b64(1), "")))
    }
  }

  @Test func base64URLRefusesTheStandardAlphabetAndBadPadding() {
    #expect(Base64URL.decode("-_8") == [0xFB, 0xFF])
    #expect(Base64URL.decode("-_8=") == [0xFB, 0xFF])
    #expect(Base64URL.decode("+/8") == nil)
    #expect(Base64URL.decode("-_8==") == nil)
    #expect(Base64URL.decode("-_=8") == nil)
    #expect(Base64URL.decode("AA AA") == nil)
    #expect(Base64URL.decode("") == [])
  }
}

/// Deregistration entries are validated and say what they cover (so a Dereg for another appID deletes nothing).
@Suite struct DeregistrationRequestTests {
  let key = Msg.b64(32)

  @Test func entriesAreValidatedAndScoped() throws {
    let r = try Msg.decode(Msg.dereg([("7B1D#0001", key), ("7b1d#0002", "")]), expecting: .dereg)
    guard case .deregistration(let d) = r,
      case .deregistration(let all) = try Msg.decode(Msg.dereg([("", "")]), expecting: .dereg)
    else {
      Issue.record("not a deregistration")
      return
    }
    #expect(d.appID == "https://rp.example.com/facets")
    #expect(d.authenticators.map(\.scope) == [.key(aaid: "7B1D#0001", keyID: key), .allKeys(aaid: "7b1d#0002")])
    #expect(all.authenticators.map(\.scope) == [.allAuthenticators])
    #expect(d.authenticators[0].covers(aaid: "7b1d#0001", keyID: key))
    #expect(!d.authenticators[0].covers(aaid: "7B1D#0001", keyID: Msg.b64(32, 8)))
    #expect(!d.authenticators[1].covers(aaid: "7B1D#0001", keyID: key))
    #expect(all.authenticators[0].covers(aaid: "F1D0#0001", keyID: key))
  }

  @Test func badEntriesAreRefused() throws {
    #expect(throws: UAFMessageError.invalidField(request: 0, field: "authenticators[1].aaid", rule: .aaid)) {
      try Msg.decode(Msg.dereg([("7B1D#0001", key), ("7B1D", key)]))
    }
    #expect(
      throws: UAFMessageError.invalidField(
        request: 0, field: "authenticators[0].keyID", rule: .base64URL(minBytes: 32, maxBytes: 2048))
    ) {
      try Msg.decode(Msg.dereg([("7B1D#0001", Msg.b64(31))]))
    }
    #expect(throws: UAFMessageError.invalidField(request: 0, field: "authenticators[0].keyID", rule: .keyIDWithoutAAID))
    {
      try Msg.decode(Msg.dereg([("", key)]))
    }
    let uaf10 = Msg.header("Dereg", minor: 0, serverData: nil)
    #expect(
      throws: UAFMessageError.invalidField(request: 0, field: "authenticators[0]", rule: .wildcardNeedsUAF11)
    ) {
      try Msg.decode(Msg.dereg([("7B1D#0001", "")], header: uaf10))
    }
    // A key-scoped entry is valid in UAF 1.0: it decodes to exactly that key's scope.
    guard case .deregistration(let d) = try Msg.decode(Msg.dereg([("7B1D#0001", key)], header: uaf10)) else {
      Issue.record("not a deregistration")
      return
    }
    #expect(d.authenticators.map(\.scope) == [.key(aaid: "7B1D#0001", keyID: key)])
  }
}
