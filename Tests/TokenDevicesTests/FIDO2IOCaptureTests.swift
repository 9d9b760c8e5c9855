import Testing

@testable import TokenDevices

/// The custom I/O's view of the reports: the response to a getInfo request is reassembled from CTAPHID packets
/// (initialization + continuations, KEEPALIVE between them, other channels' packets ignored) and parsed; any
/// other request, an error answer or a broken sequence leaves nothing captured.
struct FIDO2IOCaptureTests {
  static let channel: [UInt8] = [0x01, 0x02, 0x03, 0x04]

  /// The reports of a CTAPHID message (64 bytes each, zero padded).
  static func packets(_ command: UInt8, _ payload: [UInt8], channel: [UInt8] = channel) -> [[UInt8]] {
    func padded(_ r: [UInt8]) -> [UInt8] { r + [UInt8](repeating: 0, count: 64 - r.count) }
    var out = [
      padded(channel + [command, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)] + payload.prefix(57))
    ]
    var rest = payload.dropFirst(57)
    var sequence: UInt8 = 0
    while !rest.isEmpty {
      out.append(padded(channel + [sequence] + rest.prefix(59)))
      rest = rest.dropFirst(59)
      sequence += 1
    }
    return out
  }

  static func send(_ c: FIDO2IO.Context, _ reports: [[UInt8]]) {
    for r in reports { r.withUnsafeBufferPointer { c.sent($0) } }
  }

  static func receive(_ c: FIDO2IO.Context, _ reports: [[UInt8]]) {
    for r in reports { r.withUnsafeBufferPointer { c.received($0) } }
  }

  static let answer = [0x00] + FIDO2GetInfoTests.virtualKey  // status OK, then the map (3 reports)
  static let keepalive = packets(0xBB, [0x02])  // UP_NEEDED

  @Test func aGetInfoAnswerIsReassembledAcrossPackets() throws {
    let c = FIDO2IO.Context(readDeadlineMs: 1000)
    Self.send(c, Self.packets(0x90, [0x04]))
    let reports = Self.packets(0x90, Self.answer)
    #expect(reports.count == 3)
    // A keepalive and another channel's packet in between change nothing.
    Self.receive(c, [reports[0]] + Self.keepalive + Self.packets(0x90, [0x00, 0xA0], channel: [9, 9, 9, 9]))
    #expect(c.capturedInfo == nil)
    Self.receive(c, Array(reports[1...]))
    #expect(c.capturedInfo == FIDO2GetInfo.parse(FIDO2GetInfoTests.virtualKey))
    #expect(c.capturedInfo != nil)
  }

  @Test func onlyTheAnswerToGetInfoIsTaken() {
    // getPINRetries (clientPIN 0x06): its answer is not getInfo's.
    let c = FIDO2IO.Context(readDeadlineMs: 1000)
    Self.send(c, Self.packets(0x90, [0x06, 0xA2, 0x01, 0x01, 0x02, 0x01]))
    Self.receive(c, Self.packets(0x90, Self.answer))
    #expect(c.capturedInfo == nil)
    // An error status, a CTAPHID ERROR packet, a skipped sequence number: nothing.
    Self.send(c, Self.packets(0x90, [0x04]))
    Self.receive(c, Self.packets(0x90, [0x01] + FIDO2GetInfoTests.virtualKey))
    Self.send(c, Self.packets(0x90, [0x04]))
    Self.receive(c, Self.packets(0xBF, [0x06]))
    Self.send(c, Self.packets(0x90, [0x04]))
    let reports = Self.packets(0x90, Self.answer)
    Self.receive(c, [reports[0], reports[2]])
    #expect(c.capturedInfo == nil)
  }

  @Test func aCancelFromAnotherThreadLeavesTheCaptureAlone() {
    let c = FIDO2IO.Context(readDeadlineMs: 1000)
    Self.send(c, Self.packets(0x90, [0x04]))
    Self.send(c, Self.packets(0x91, []))  // CTAPHID_CANCEL (FIDO2Canceller)
    Self.receive(c, Self.packets(0x90, Self.answer))
    #expect(c.capturedInfo != nil)
  }
}
