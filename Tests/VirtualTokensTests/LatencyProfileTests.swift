import Testing

@testable import VirtualTokens

/// The latency profiles' tables: which command waits how long (`LatencyProfile.pivDelay`, `fido2Delay`). Only the
/// mapping is checked, never a wall clock: speed is measured (Tools/bench/provision), not timed in tests.
@Suite struct LatencyProfileTests {
  let yk = LatencyProfile.yubikey5

  @Test func namesAreTheOptionsValues() {
    #expect(LatencyProfile.named("none") == LatencyProfile.none)
    #expect(LatencyProfile.named("yubikey5") == .yubikey5)
    #expect(LatencyProfile.named("yubikey") == nil)
  }

  @Test func yubikey5Figures() {
    #expect(yk.pinCheck == .milliseconds(9))
    #expect(yk.p256 == .milliseconds(72))
    #expect(yk.p256KeyGeneration == .milliseconds(81))
  }

  @Test func pivCommandsByInstruction() {
    let pin: [UInt8] = [0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0xFF, 0xFF]
    #expect(yk.pivDelay([0x00, 0x20, 0x00, 0x80, 0x08] + pin) == .milliseconds(9))  // VERIFY
    #expect(yk.pivDelay([0x00, 0x20, 0x00, 0x80]) == .zero)  // VERIFY without data: PIN status, nothing compared
    #expect(yk.pivDelay([0x00, 0x24, 0x00, 0x80, 0x10] + pin + pin) == .milliseconds(9))  // CHANGE REFERENCE DATA
    #expect(yk.pivDelay([0x00, 0x2C, 0x00, 0x80, 0x10] + pin + pin) == .milliseconds(9))  // RESET RETRY COUNTER
    // GENERAL AUTHENTICATE: P-256 signs; management-key authentication (3DES, AES-192) and P-384 are not modelled.
    let challenge: [UInt8] = [0x7C, 0x24, 0x82, 0x00, 0x81, 0x20] + [UInt8](repeating: 0xAB, count: 32)
    #expect(yk.pivDelay([0x00, 0x87, 0x11, 0x9A, UInt8(challenge.count)] + challenge) == .milliseconds(72))
    #expect(yk.pivDelay([0x00, 0x87, 0x03, 0x9B, 0x04, 0x7C, 0x02, 0x80, 0x00]) == .zero)
    #expect(yk.pivDelay([0x00, 0x87, 0x0A, 0x9B, 0x04, 0x7C, 0x02, 0x80, 0x00]) == .zero)
    #expect(yk.pivDelay([0x00, 0x87, 0x14, 0x9A, UInt8(challenge.count)] + challenge) == .zero)
    // A chained part is only gathered: the wait comes with the last part.
    #expect(yk.pivDelay([0x10, 0x87, 0x11, 0x9A, UInt8(challenge.count)] + challenge) == .zero)
    // GENERATE ASYMMETRIC KEY PAIR, short and extended length.
    #expect(yk.pivDelay([0x00, 0x47, 0x00, 0x9A, 0x05, 0xAC, 0x03, 0x80, 0x01, 0x11, 0x00]) == .milliseconds(81))
    #expect(yk.pivDelay([0x00, 0x47, 0x00, 0x9A, 0x00, 0x00, 0x05, 0xAC, 0x03, 0x80, 0x01, 0x11]) == .milliseconds(81))
    #expect(yk.pivDelay([0x00, 0x47, 0x00, 0x9A, 0x05, 0xAC, 0x03, 0x80, 0x01, 0x14, 0x00]) == .zero)
    #expect(yk.pivDelay([0x00, 0x47, 0x00, 0x9A]) == .zero)
    // The rest: SELECT, GET DATA, GET VERSION, GET METADATA, GET RESPONSE.
    #expect(yk.pivDelay([0x00, 0xA4, 0x04, 0x00, 0x05, 0xA0, 0x00, 0x00, 0x03, 0x08]) == .zero)
    #expect(yk.pivDelay([0x00, 0xCB, 0x3F, 0xFF, 0x05, 0x5C, 0x03, 0x5F, 0xC1, 0x02, 0x00]) == .zero)
    #expect(yk.pivDelay([0x00, 0xFD, 0x00, 0x00]) == .zero)
    #expect(yk.pivDelay([0x00, 0xF7, 0x00, 0x9A]) == .zero)
    #expect(yk.pivDelay([0x00, 0xC0, 0x00, 0x00, 0x00]) == .zero)
    #expect(yk.pivDelay([0x00]) == .zero)
  }

  func ctap(_ command: UInt8, _ pairs: (CBOR, CBOR)...) -> [UInt8] {
    [command] + CBOR.map(pairs.map { CBORPair(key: $0.0, value: $0.1) }).encoded()
  }

  @Test func fido2CommandsByCTAPCommand() {
    let hash = CBOR.bytes([UInt8](repeating: 1, count: 32))
    #expect(yk.fido2Delay(ctap(0x01, (.int(1), hash))) == .milliseconds(81 + 72))  // makeCredential
    #expect(yk.fido2Delay(ctap(0x02, (.int(1), .text("rp")), (.int(2), hash))) == .milliseconds(72))  // getAssertion
    let hmacSecret = CBOR.map((.text("hmac-secret"), .map((.int(1), .map([])), (.int(2), .bytes([])))))
    #expect(yk.fido2Delay(ctap(0x02, (.int(1), .text("rp")), (.int(4), hmacSecret))) == .milliseconds(144))
    #expect(yk.fido2Delay([0x08]) == .milliseconds(72))  // getNextAssertion
    // clientPIN by subcommand.
    #expect(yk.fido2Delay(ctap(0x06, (.int(1), .int(2)), (.int(2), .int(1)))) == .zero)  // getPINRetries
    #expect(yk.fido2Delay(ctap(0x06, (.int(1), .int(2)), (.int(2), .int(2)))) == .milliseconds(72))  // getKeyAgreement
    for sub in [3, 4, 5, 9] {  // setPIN, changePIN, getPinToken, getPinUvAuthTokenUsingPinWithPermissions
      #expect(yk.fido2Delay(ctap(0x06, (.int(1), .int(2)), (.int(2), .int(sub)))) == .milliseconds(81))
    }
    // getInfo, credentialManagement, reset, selection; an empty or undecodable request.
    for command: UInt8 in [0x04, 0x0A, 0x07, 0x0B] { #expect(yk.fido2Delay([command]) == .zero) }
    #expect(yk.fido2Delay([]) == .zero)
    #expect(yk.fido2Delay([0x06, 0xFF]) == .zero)
  }

  @Test func noneWaitsForNothing() {
    #expect(LatencyProfile.none.pivDelay([0x00, 0x20, 0x00, 0x80]) == .zero)
    #expect(LatencyProfile.none.pivDelay([0x00, 0x47, 0x00, 0x9A, 0x05, 0xAC, 0x03, 0x80, 0x01, 0x11, 0x00]) == .zero)
    #expect(LatencyProfile.none.fido2Delay(ctap(0x01, (.int(1), .bytes([])))) == .zero)
    #expect(LatencyProfile.none.fido2Delay(ctap(0x06, (.int(1), .int(2)), (.int(2), .int(5)))) == .zero)
  }
}
