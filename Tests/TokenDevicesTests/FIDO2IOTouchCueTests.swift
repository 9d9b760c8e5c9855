import Testing

@testable import TokenDevices

/// The custom I/O's one look at what a key sends: a KEEPALIVE with status UP_NEEDED (CTAP 2.1 §11.2.9.2.1) fires
/// the touch cue, once per operation; KEEPALIVE PROCESSING, other commands and short reports do not.
struct FIDO2IOTouchCueTests {
  static func report(_ bytes: [UInt8]) -> [UInt8] { bytes + [UInt8](repeating: 0, count: 64 - bytes.count) }
  static let channel: [UInt8] = [0x01, 0x02, 0x03, 0x04]
  static let processing = report(channel + [0xBB, 0x00, 0x01, 0x01])
  static let upNeeded = report(channel + [0xBB, 0x00, 0x01, 0x02])
  static let cborWithTwo = report(channel + [0x90, 0x00, 0x01, 0x02])  // a CBOR answer whose first byte is 2

  static func receive(_ c: FIDO2IO.Context, _ reports: [[UInt8]]) {
    for r in reports { r.withUnsafeBufferPointer { c.received($0) } }
  }

  @Test func upNeededFiresTheCueOnce() {
    let c = FIDO2IO.Context(readDeadlineMs: 1000)
    nonisolated(unsafe) var cues = 0
    c.touchCue = { cues += 1 }
    Self.receive(c, [Self.processing, Self.cborWithTwo])
    #expect(cues == 0)
    Self.receive(c, [Self.upNeeded, Self.upNeeded])
    #expect(cues == 1)
    #expect(c.touchCue == nil)
  }

  @Test func theAnswerToOurINITTellsTheChannelAndCapabilities() {
    let c = FIDO2IO.Context(readDeadlineMs: 1000)
    let nonce: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8]
    let broadcast: [UInt8] = [0xFF, 0xFF, 0xFF, 0xFF]
    Self.report(broadcast + [0x86, 0x00, 0x08] + nonce).withUnsafeBufferPointer { c.sent($0) }
    // Another program's INIT answer (another nonce) first: passed over.
    let other: [UInt8] = [9, 9, 9, 9, 9, 9, 9, 9] + [7, 7, 7, 7] + [2, 5, 4, 3, 0x01]
    Self.receive(c, [Self.report(broadcast + [0x86, 0x00, 0x11] + other)])
    #expect(c.initCapabilities == nil && c.channel == nil)
    Self.receive(c, [Self.report(broadcast + [0x86, 0x00, 0x11] + nonce + Self.channel + [2, 5, 4, 3, 0x05])])
    #expect(c.initCapabilities == 0x05 && c.channel == Self.channel)
    // Another channel's UP_NEEDED is not a cue for us; ours is.
    nonisolated(unsafe) var cues = 0
    c.touchCue = { cues += 1 }
    Self.receive(c, [Self.report([7, 7, 7, 7, 0xBB, 0x00, 0x01, 0x02])])
    #expect(cues == 0)
    Self.receive(c, [Self.upNeeded])
    #expect(cues == 1)
  }

  @Test func withoutACueNothingHappens() {
    let c = FIDO2IO.Context(readDeadlineMs: 1000)
    Self.receive(c, [Self.upNeeded, [0xBB, 0, 0, 0, 0xBB, 0, 1, 2]])
    #expect(c.touchCue == nil && !c.timedOut && !c.peerGone)
  }
}
