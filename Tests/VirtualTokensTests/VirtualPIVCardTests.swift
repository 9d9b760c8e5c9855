import CLibCrypto
import SystemCrypto
import Foundation
import Testing

@testable import VirtualTokens

/// The virtual card against the spec's own byte strings (../shared/specs/token-protocols.md §1), without
/// the client: simulator and client must not be able to share a bug.
@Suite struct VirtualPIVCardTests {
  let card = VirtualPIVCard(state: .factory(serial: 42))

  func send(_ hex: String) -> (data: [UInt8], sw: UInt16) {
    let bytes = hex.split(separator: " ").map { UInt8($0, radix: 16)! }
    let r = card.process(bytes)
    return (Array(r.dropLast(2)), UInt16(r[r.count - 2]) << 8 | UInt16(r[r.count - 1]))
  }

  func pinBlock(_ s: String) -> String {
    (Array(s.utf8) + [UInt8](repeating: 0xFF, count: 8 - s.utf8.count)).map { String(format: "%02X", $0) }
      .joined(separator: " ")
  }

  @Test func selectsByTruncatedAID() {
    let r = send("00 A4 04 00 05 A0 00 00 03 08")
    #expect(r.sw == 0x9000)
    // YubiKey's real reply (spec §1.1).
    #expect(r.data == [0x61, 0x11, 0x4F, 0x06, 0, 0, 0x10, 0, 1, 0, 0x79, 0x07, 0x4F, 0x05, 0xA0, 0, 0, 3, 8])
    #expect(send("00 A4 04 00 09 A0 00 00 03 08 00 00 10 00 00").sw == 0x9000)
    #expect(send("00 A4 04 00 07 A0 00 00 06 47 2F 00").sw == 0x6A82)  // FIDO AID: not here
  }

  @Test func unknownInstructionAndClass() {
    #expect(send("00 12 00 00").sw == 0x6D00)
    #expect(send("80 FD 00 00").sw == 0x6E00)
  }

  @Test func verifyCountsDownAndBlocks() {
    #expect(send("00 20 00 80").sw == 0x63C3)
    #expect(send("00 20 00 80 08 " + pinBlock("654321")).sw == 0x63C2)
    #expect(send("00 20 00 80").sw == 0x63C2)  // empty VERIFY spends no try
    #expect(send("00 20 00 80 08 " + pinBlock("654321")).sw == 0x63C1)
    #expect(send("00 20 00 80 08 " + pinBlock("654321")).sw == 0x63C0)
    #expect(send("00 20 00 80 08 " + pinBlock("123456")).sw == 0x6983)  // blocked even when right
    #expect(send("00 20 00 80").sw == 0x6983)
  }

  @Test func correctPINResetsCounterAndVerifyResetDropsState() {
    #expect(send("00 20 00 80 08 " + pinBlock("000000")).sw == 0x63C2)
    #expect(send("00 20 00 80 08 " + pinBlock("123456")).sw == 0x9000)
    #expect(send("00 20 00 80").sw == 0x9000)
    #expect(send("00 20 FF 80").sw == 0x9000)
    #expect(send("00 20 00 80").sw == 0x63C3)
  }

  @Test func changeAndUnblock() {
    #expect(send("00 24 00 80 10 " + pinBlock("000000") + " " + pinBlock("111111")).sw == 0x63C2)
    #expect(send("00 24 00 80 10 " + pinBlock("123456") + " " + pinBlock("12345")).sw == 0x6A80)  // too short
    #expect(send("00 24 00 80 10 " + pinBlock("123456") + " " + pinBlock("111111")).sw == 0x9000)
    #expect(card.state.pin == Array("111111".utf8) && card.state.pinRetries == 3)
    for _ in 0..<3 { _ = send("00 20 00 80 08 " + pinBlock("999999")) }
    #expect(send("00 20 00 80").sw == 0x6983)
    #expect(send("00 2C 00 80 10 " + pinBlock("00000000") + " " + pinBlock("222222")).sw == 0x63C2)
    #expect(send("00 2C 00 80 10 " + pinBlock("12345678") + " " + pinBlock("222222")).sw == 0x9000)
    #expect(send("00 20 00 80 08 " + pinBlock("222222")).sw == 0x9000)
    #expect(card.state.pukRetries == 3)
  }

  @Test func metadataReportsRetriesAndDefaults() {
    let r = send("00 F7 00 80 00")
    #expect(r.sw == 0x9000)
    #expect(r.data == [0x01, 0x01, 0xFF, 0x05, 0x01, 0x01, 0x06, 0x02, 0x03, 0x03])
    #expect(send("00 F7 00 9A 00").sw == 0x6A82)  // empty slot
  }

  /// Mutual authentication exactly as spec §1.5 describes it, computed here with libcrypto directly.
  func authenticate(key: [UInt8] = PIVCardState.defaultManagementKey) -> UInt16 {
    let r1 = send("00 87 03 9B 04 7C 02 80 00 00")
    guard r1.sw == 0x9000, r1.data.count == 12 else { return r1.sw }
    let witness = des3(Array(r1.data[4..<12]), key: key, encrypt: false)
    let challenge: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8]
    let body = [0x7C, 0x14, 0x80, 0x08] + witness + [0x81, 0x08] + challenge
    let r2 = card.process([0x00, 0x87, 0x03, 0x9B, UInt8(body.count)] + body + [0x00])
    let sw = UInt16(r2[r2.count - 2]) << 8 | UInt16(r2[r2.count - 1])
    if sw == 0x9000 { #expect(Array(r2[4..<12]) == des3(challenge, key: key, encrypt: true)) }
    return sw
  }

  @Test func managementKeyMutualAuthentication() {
    #expect(authenticate(key: [UInt8](repeating: 9, count: 24)) == 0x6982)
    #expect(authenticate() == 0x9000)
    #expect(card.managementAuthenticated)
  }

  @Test func generateNeedsManagementKeyThenSignsVerifiably() throws {
    #expect(send("00 47 00 9A 05 AC 03 80 01 11 00").sw == 0x6982)
    #expect(authenticate() == 0x9000)
    let g = send("00 47 00 9A 05 AC 03 80 01 11 00")
    #expect(g.sw == 0x9000)
    #expect(g.data.prefix(5) == [0x7F, 0x49, 0x43, 0x86, 0x41])
    let pub = try P256.Signing.PublicKey(x963Representation: g.data[5...])
    let digest = SHA256.hash(data: Array("hello".utf8))
    let body: [UInt8] = [0x7C, 0x24, 0x82, 0x00, 0x81, 0x20] + Array(digest)
    let noPIN = card.process([0x00, 0x87, 0x11, 0x9A, UInt8(body.count)] + body + [0])
    #expect(noPIN.suffix(2) == [0x69, 0x82])
    #expect(send("00 20 00 80 08 " + pinBlock("123456")).sw == 0x9000)
    let r = card.process([0x00, 0x87, 0x11, 0x9A, UInt8(body.count)] + body + [0])
    #expect(r.suffix(2) == [0x90, 0x00])
    #expect(r[0] == 0x7C && r[2] == 0x82)
    let sig = try P256.Signing.ECDSASignature(derRepresentation: r[4..<(r.count - 2)])
    #expect(pub.isValidSignature(sig, for: digest))
  }

  @Test func signWithEmptySlotIs6A80() {
    _ = send("00 20 00 80 08 " + pinBlock("123456"))
    let body: [UInt8] = [0x7C, 0x24, 0x82, 0x00, 0x81, 0x20] + [UInt8](repeating: 1, count: 32)
    #expect(card.process([0x00, 0x87, 0x11, 0x9C, UInt8(body.count)] + body).suffix(2) == [0x6A, 0x80])
  }

  @Test func chainedPutDataAndGetResponse() {
    #expect(authenticate() == 0x9000)
    let cert = (0..<1000).map { UInt8($0 & 0xFF) }
    let obj: [UInt8] = [0x5C, 0x03, 0x5F, 0xC1, 0x05, 0x53, 0x82, 0x03, 0xE8] + cert
    var chunks = stride(from: 0, to: obj.count, by: 255).map { Array(obj[$0..<min($0 + 255, obj.count)]) }
    let last = chunks.removeLast()
    for c in chunks { #expect(card.process([0x10, 0xDB, 0x3F, 0xFF, UInt8(c.count)] + c).suffix(2) == [0x90, 0x00]) }
    #expect(card.process([0x00, 0xDB, 0x3F, 0xFF, UInt8(last.count)] + last).suffix(2) == [0x90, 0x00])
    var r = send("00 CB 3F FF 05 5C 03 5F C1 05 00")
    var all = r.data
    while r.sw >> 8 == 0x61 {
      r = send("00 C0 00 00 00")
      all += r.data
    }
    #expect(r.sw == 0x9000)
    #expect(all == [0x53, 0x82, 0x03, 0xE8] + cert)
  }

  @Test func powerCycleForgetsVolatileState() {
    _ = send("00 20 00 80 08 " + pinBlock("123456"))
    #expect(authenticate() == 0x9000)
    card.powerCycle()
    #expect(send("00 20 00 80").sw == 0x63C3)
    #expect(send("00 47 00 9A 05 AC 03 80 01 11 00").sw == 0x6982)
  }

  @Test func malformedAPDUsAreRefused() {
    #expect(card.process([0x00, 0x20]) == [0x67, 0x00])
    #expect(card.process([0x00, 0x20, 0x00, 0x80, 0x08, 1, 2]) == [0x67, 0x00])  // Lc larger than data
    #expect(card.process([0x00, 0xCB, 0x3F, 0xFF, 0x02, 0x5C, 0x09]) == [0x6A, 0x80])  // truncated TLV
  }

  @Test func resetOnlyWhenBothBlocked() {
    #expect(send("00 FB 00 00").sw == 0x6985)
    for _ in 0..<3 { _ = send("00 20 00 80 08 " + pinBlock("999999")) }
    for _ in 0..<3 { _ = send("00 2C 00 80 10 " + pinBlock("00000000") + " " + pinBlock("222222")) }
    #expect(send("00 FB 00 00").sw == 0x9000)
    #expect(send("00 20 00 80 08 " + pinBlock("123456")).sw == 0x9000)
  }

  @Test func statePersistsAcrossRestart() throws {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("vpiv-\(UUID().uuidString).json")
    defer { try? FileManager.default.removeItem(at: url) }
    card.onStateChange = { try? $0.save(url) }
    _ = send("00 20 00 80 08 " + pinBlock("999999"))
    let reloaded = try #require(try PIVCardState.load(url))
    #expect(reloaded.pinRetries == 2)
    let attrs = try FileManager.default.attributesOfItem(atPath: url.path)
    #expect((attrs[.posixPermissions] as? NSNumber)?.intValue == 0o600)
  }
}

func des3(_ block: [UInt8], key: [UInt8], encrypt: Bool) -> [UInt8] {
  let ctx = EVP_CIPHER_CTX_new()
  defer { EVP_CIPHER_CTX_free(ctx) }
  EVP_CipherInit_ex(ctx, EVP_des_ede3_ecb(), nil, key, nil, encrypt ? 1 : 0)
  EVP_CIPHER_CTX_set_padding(ctx, 0)
  var out = [UInt8](repeating: 0, count: 16)
  var len: Int32 = 0
  EVP_CipherUpdate(ctx, &out, &len, block, Int32(block.count))
  return Array(out.prefix(Int(len)))
}
