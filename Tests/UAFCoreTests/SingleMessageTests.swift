import Foundation
import Testing
import UAFCore

/// A message is checked against the operation that was asked, and the UAF single-message rules, before anything is
/// processed (the core's half; the client's is in `UAFClientTests`).
@Suite struct SingleMessageTests {
  let key = Msg.b64(32)

  @Test func deregAnswerToARegistrationIsRefused() {
    let dereg = Msg.dereg([("", "")])
    #expect(throws: UAFMessageError.unexpectedOperation(expected: .reg, got: .dereg)) {
      try Msg.decode(dereg, expecting: .reg)
    }
    #expect(throws: UAFMessageError.unexpectedOperation(expected: .auth, got: .dereg)) {
      try Msg.decode(dereg, expecting: .auth)
    }
    #expect(throws: UAFMessageError.unexpectedOperation(expected: .dereg, got: .reg)) {
      try Msg.decode(Msg.reg(), expecting: .dereg)
    }
    // Even in a version we do not speak, the op is checked first.
    #expect(throws: UAFMessageError.unexpectedOperation(expected: .reg, got: .dereg)) {
      try Msg.decode(Msg.dereg([("", "")], header: Msg.header("Dereg", minor: 9, serverData: nil)), expecting: .reg)
    }
  }

  @Test func expectedOperationPasses() throws {
    guard case .registration(let r) = try Msg.decode(Msg.reg(), expecting: .reg) else {
      Issue.record("not a registration")
      return
    }
    #expect(r.username == "alice")
    guard case .authentication = try Msg.decode(Msg.auth(), expecting: .auth) else {
      Issue.record("not an authentication")
      return
    }
  }

  @Test func mixedOperationsAreRefused() {
    let reg10 = Msg.reg(header: Msg.header("Reg", minor: 0))
    let dereg11 = Msg.dereg([("", "")])
    #expect(throws: UAFMessageError.mixedOperations([.reg, .dereg])) { try Msg.decode(reg10, dereg11) }
    #expect(throws: UAFMessageError.mixedOperations([.reg, .dereg])) {
      try Msg.decode(reg10, dereg11, expecting: .reg)
    }
  }

  @Test func duplicateVersionsAreRefused() {
    let a = Msg.reg(username: "alice")
    let b = Msg.reg(username: "mallory")
    #expect(throws: UAFMessageError.duplicateVersion(.uaf11)) { try Msg.decode(a, b, expecting: .reg) }
  }

  @Test func highestSupportedVersionIsPicked() throws {
    let v10 = Msg.reg(username: "one-zero", header: Msg.header("Reg", minor: 0))
    let v11 = Msg.reg(username: "one-one")
    let v12 = Msg.reg(username: "one-two", header: Msg.header("Reg", minor: 2))
    for order in [[v10, v11], [v11, v10], [v10, v12, v11], [v12, v10, v11]] {
      let r = try UAFMessageCodec.decodeRequest(Msg.json(order), expecting: .reg)
      guard case .registration(let reg) = r else {
        Issue.record("not a registration")
        return
      }
      #expect(reg.username == "one-one" && reg.header.upv == .uaf11)
    }
    let only10 = try UAFMessageCodec.decodeRequest(Msg.json([v12, v10]), expecting: .reg)
    #expect(only10.header.upv == .uaf10)
    // The old API returns the same single pick.
    #expect(try UAFMessageCodec.decodeRequests(Msg.json([v10, v11])).map(\.header.upv) == [.uaf11])
  }

  @Test func onlyThePickedRequestIsValidated() throws {
    // A 1.2 entry we do not speak may have a shape we do not know; it is not read past its header.
    let future: [String: Any] = ["header": Msg.header("Reg", minor: 2), "challenge": 42]
    let r = try UAFMessageCodec.decodeRequest(Msg.json([future, Msg.reg()]), expecting: .reg)
    #expect(r.header.upv == .uaf11)
    // The picked one is, and the error names its index.
    #expect(
      throws: UAFMessageError.invalidField(
        request: 1, field: "challenge", rule: .base64URL(minBytes: 8, maxBytes: 64))
    ) {
      try Msg.decode(Msg.reg(header: Msg.header("Reg", minor: 0)), Msg.reg(challenge: ""), expecting: .reg)
    }
  }

  @Test func malformedDetailsNameFieldsNotServerText() {
    #expect(throws: UAFMessageError.malformed("request 0: header.op is not Reg, Auth or Dereg")) {
      try UAFMessageCodec.decodeRequest(
        #"[{"header":{"upv":{"major":1,"minor":1},"op":"\u001b[31mX"}}]"#, expecting: nil)
    }
    #expect(throws: UAFMessageError.malformed("request 0 (Reg): missing challenge")) {
      try UAFMessageCodec.decodeRequest(
        #"[{"header":{"upv":{"major":1,"minor":1},"op":"Reg"},"username":"a","policy":{"accepted":[]}}]"#,
        expecting: .reg)
    }
    #expect(throws: UAFMessageError.malformed("request 1: missing header")) {
      try UAFMessageCodec.decodeRequest(Msg.json([Msg.reg(), ["challenge": "x"]]), expecting: .reg)
    }
    #expect(throws: UAFMessageError.malformed("a UAF message is a JSON array of requests")) {
      try UAFMessageCodec.decodeRequest("{}", expecting: nil)
    }
    #expect(throws: UAFMessageError.malformed("not JSON")) { try UAFMessageCodec.decodeRequest("[", expecting: nil) }
    #expect(throws: UAFMessageError.malformed("the message holds no request")) {
      try UAFMessageCodec.decodeRequest("[]", expecting: nil)
    }
  }

  @Test func hostileNumbersAndBytesAreTypedErrors() {
    for (json, problem) in [
      (#"[{"header":{"upv":{"major":1e400,"minor":1},"op":"Reg"}}]"#, "request 0: not the shape UAF defines"),
      (#"[{"header":{"upv":{"major":1.5,"minor":1},"op":"Reg"}}]"#, "request 0: not the shape UAF defines"),
      (
        #"[{"header":{"upv":{"major":99999999999999999999999,"minor":1},"op":"Reg"}}]"#,
        "request 0: not the shape UAF defines"
      ),
      (String(repeating: "[", count: 100_000), "not JSON"),
    ] {
      #expect(throws: UAFMessageError.malformed(problem)) { try UAFMessageCodec.decodeRequest(json, expecting: nil) }
    }
    #expect(throws: UAFMessageError.malformed("not JSON")) {
      try UAFMessageCodec.decodeRequest(bytes: [0x5B, 0xFF, 0xFE, 0x5D], expecting: nil)
    }
  }
}
