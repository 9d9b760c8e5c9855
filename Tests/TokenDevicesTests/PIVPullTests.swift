import Testing

@testable import TokenDevices

/// A card pulled out with its reader (a USB token): every APDU fails with "removed", and pcscd answers the
/// session's reconnect with what it says for a handle on a reader that is gone.
final class PulledCard: SmartCardTransport {
  var reader = "pulled"
  var atr: [UInt8] = [0x3B, 0x80, 0x80, 0x01, 0x01]
  var resetOnClose = false
  let reconnectError: SmartCardError
  init(reconnectError: SmartCardError) { self.reconnectError = reconnectError }
  func transmit(_ command: [UInt8]) throws(SmartCardError) -> [UInt8] { throw .cardRemoved(reader: reader) }
  func reconnect() throws(SmartCardError) { throw reconnectError }
  func beginTransaction() throws(SmartCardError) {}
  func endTransaction() {}
}

@Suite struct PIVPullTests {
  /// Found by the lab's pull sweep (Tests/lab/test_pull_sweep.py): a token pulled during a VERIFY was reported as
  /// "The smart-card service failed (SCardReconnect returned 0x80100011)", exit 1, instead of a removal (exit 10).
  @Test(arguments: [PCSCStatus.invalidValue, .invalidHandle])
  func aTokenPulledWithItsReaderIsARemoval(status: PCSCStatus) {
    let pulled = PulledCard(reconnectError: .pcsc(status, call: "SCardReconnect"))
    let s = PIVSession(transport: pulled)
    #expect(throws: TokenError.smartCard(.cardRemoved(reader: "pulled"))) {
      try s.send(APDU(ins: 0x20, p1: 0x00, p2: 0x80))
    }
  }

  @Test func aResetCardWhoseReconnectFailsSaysWhy() {
    final class ResetCard: SmartCardTransport {
      var reader = "reset"
      var atr: [UInt8] = [0x3B, 0x80, 0x80, 0x01, 0x01]
      var resetOnClose = false
      func transmit(_ command: [UInt8]) throws(SmartCardError) -> [UInt8] {
        throw .pcsc(.resetCard, call: "SCardTransmit")
      }
      func reconnect() throws(SmartCardError) { throw .pcsc(.sharingViolation, call: "SCardReconnect") }
      func beginTransaction() throws(SmartCardError) {}
      func endTransaction() {}
    }
    let s = PIVSession(transport: ResetCard())
    #expect(throws: TokenError.smartCard(.pcsc(.sharingViolation, call: "SCardReconnect"))) {
      try s.send(APDU(ins: 0x20, p1: 0x00, p2: 0x80))
    }
  }

  /// Found by the kill sweep (Tests/cli/test_kill_sweep.py, PIV PIN change killed after its first APDU): the next
  /// run's first transmit met the card pcscd was resetting for the killed process and failed "SCardTransmit returned
  /// 0x8010000F". It is a reset: reconnect, SELECT again, the command once more.
  @Test func aProtocolMismatchIsAResetSeenEarly() throws {
    final class ResettingCard: SmartCardTransport {
      var reader = "resetting"
      var atr: [UInt8] = [0x3B, 0x80, 0x80, 0x01, 0x01]
      var resetOnClose = false
      var sent: [[UInt8]] = []
      var reconnects = 0
      func transmit(_ command: [UInt8]) throws(SmartCardError) -> [UInt8] {
        sent.append(command)
        if sent.count == 1 { throw .pcsc(.protoMismatch, call: "SCardTransmit") }
        return [0x90, 0x00]
      }
      func reconnect() throws(SmartCardError) { reconnects += 1 }
      func beginTransaction() throws(SmartCardError) {}
      func endTransaction() {}
    }
    let card = ResettingCard()
    let r = try PIVSession(transport: card).send(APDU(ins: 0xF8))
    #expect(r.statusWord == .success && card.reconnects == 1)
    // The command, then after the reconnect SELECT PIV and the command again.
    #expect(card.sent.map { $0[1] } == [0xF8, 0xA4, 0xF8])
  }
}
