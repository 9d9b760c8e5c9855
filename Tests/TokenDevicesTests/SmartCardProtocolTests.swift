import Testing

@testable import TokenDevices

/// A scripted transport: records what goes out, answers from a list. Tests the processors above the
/// transport (chaining, GET RESPONSE, 6Cxx) byte by byte; the real transport is tested through pcscd.
final class ScriptedTransport: SmartCardTransport {
  var reader = "scripted"
  var atr: [UInt8] = []
  var sent: [[UInt8]] = []
  var resetOnClose = false
  var answers: [[UInt8]]
  init(_ answers: [[UInt8]]) { self.answers = answers }
  func transmit(_ command: [UInt8]) throws(SmartCardError) -> [UInt8] {
    sent.append(command)
    guard !answers.isEmpty else { throw .cardRemoved(reader: reader) }
    return answers.removeFirst()
  }
  func reconnect() throws(SmartCardError) {}
  func beginTransaction() throws(SmartCardError) {}
  func endTransaction() {}
}

@Suite struct SmartCardProtocolTests {
  @Test func chainsLongCommandsIn255ByteChunks() throws {
    let t = ScriptedTransport([[0x90, 0x00], [0x90, 0x00], [0x90, 0x00]])
    let p = SmartCardProtocol(transport: t)
    let data = (0..<600).map { UInt8($0 & 0xFF) }
    let r = try p.send(APDU(ins: 0xDB, p1: 0x3F, p2: 0xFF, data: data))
    #expect(r.statusWord == .success)
    #expect(t.sent.count == 3)
    #expect(t.sent[0][0] == 0x10 && t.sent[0][4] == 255)
    #expect(t.sent[1][0] == 0x10 && t.sent[1][4] == 255)
    #expect(t.sent[2][0] == 0x00 && t.sent[2][4] == 90)
    #expect(Array(t.sent[0][5...] + t.sent[1][5...] + t.sent[2][5...]) == data)
    #expect(p.transmitCount == 3)
  }

  @Test func chainingStopsAtFirstError() throws {
    let t = ScriptedTransport([[0x69, 0x82]])
    let r = try SmartCardProtocol(transport: t).send(APDU(ins: 0xDB, data: [UInt8](repeating: 0, count: 300)))
    #expect(r.statusWord == .securityStatusNotSatisfied)
    #expect(t.sent.count == 1)
  }

  @Test func collectsGetResponse() throws {
    let t = ScriptedTransport([[1, 2, 0x61, 0x03], [3, 4, 5, 0x61, 0x00], [6, 0x90, 0x00]])
    let r = try SmartCardProtocol(transport: t).send(APDU(ins: 0xCB, le: 0))
    #expect(r.data == [1, 2, 3, 4, 5, 6])
    #expect(r.statusWord == .success)
    #expect(t.sent[1] == [0x00, 0xC0, 0x00, 0x00, 0x03])
    #expect(t.sent[2] == [0x00, 0xC0, 0x00, 0x00, 0x00])
  }

  @Test func resendsWithLeOn6Cxx() throws {
    let t = ScriptedTransport([[0x6C, 0x04], [9, 9, 9, 9, 0x90, 0x00]])
    let r = try SmartCardProtocol(transport: t).send(APDU(ins: 0xCA, le: 0))
    #expect(r.data == [9, 9, 9, 9])
    #expect(t.sent[1].last == 0x04)
  }

  @Test func endlessGetResponseIsAnError() {
    let t = ScriptedTransport(Array(repeating: [0x00, 0x61, 0x01], count: 300))
    #expect(throws: SmartCardError.responseTooLong) { try SmartCardProtocol(transport: t).send(APDU(ins: 0xCB)) }
  }

  @Test func traceRedactsSensitiveCommandsAndTheirAnswers() throws {
    var lines: [String] = []
    let t = ScriptedTransport([[0xAA, 0xBB, 0x90, 0x00]])
    let p = SmartCardProtocol(transport: t, trace: { lines.append($0) })
    _ = try p.send(APDU(ins: 0x87, p1: 0x03, p2: 0x9B, data: [0x7C, 0x02, 0x80, 0x00], le: 0, sensitive: true))
    #expect(lines.count == 2)
    #expect(!lines.joined().contains("7C 02"))
    #expect(!lines.joined().contains("AA BB"))
    #expect(lines[1].hasSuffix("9000"))
  }
}
