import Testing

@testable import TokenDevices

/// The getInfo reader behind "getInfo once per command": what libfido2's open receives is parsed here, into
/// the same `FIDO2Info` that `fido_dev_get_cbor_info` fills (the integration test compares the two on a key).
struct FIDO2GetInfoTests {
  static func bytes(_ hex: String) -> [UInt8] {
    var out: [UInt8] = []
    var i = hex.startIndex
    while i < hex.endIndex {
      let j = hex.index(i, offsetBy: 2)
      out.append(UInt8(hex[i..<j], radix: 16)!)
      i = j
    }
    return out
  }

  /// The virtual key's answer (status byte 00 dropped), as it came over CTAPHID to python-fido2.
  static let virtualKey = bytes(
    "a90183684649444f5f325f306c4649444f5f325f315f505245684649444f5f325f3102816b686d61632d73656372657403508d5694"
      + "9509308a83475dfb3f23cb788704a762726bf5627570f564706c6174f468637265644d676d74f569636c69656e7450696ef46e70"
      + "696e557641757468546f6b656ef57563726564656e7469616c4d676d7450726576696577f5051904b0068202010cf40d04141819")

  @Test func theVirtualKeysAnswerIsRead() throws {
    let info = try #require(FIDO2GetInfo.parse(Self.virtualKey))
    #expect(
      info
        == FIDO2Info(
          versions: ["FIDO_2_0", "FIDO_2_1_PRE", "FIDO_2_1"], extensions: ["hmac-secret"],
          options: [
            "rk": true, "up": true, "plat": false, "credMgmt": true, "clientPin": false, "pinUvAuthToken": true,
            "credentialMgmtPreview": true,
          ], pinProtocols: [2, 1], minPINLength: 4, forcePINChange: false,
          aaguid: "8D569495" + "09308A83475DFB3F23CB7887",
          remainingDiscoverableCredentials: 25, firmwareVersion: nil, maxMsgSize: 1200))
  }

  /// A key that wants a new PIN of at least 8 characters, with built-in UV and a firmware version; integer keys
  /// out of canonical order and a key TokenBridge does not read (0x07) are accepted.
  @Test func aHandBuiltAnswerWithPINPolicyIsRead() throws {
    let aaguid = [UInt8](repeating: 0xAB, count: 16)
    var cbor: [UInt8] = [0xA8]
    cbor += [0x0D, 0x08]  // minPINLength 8
    cbor += [0x01, 0x81, 0x68] + Array("FIDO_2_1".utf8)  // versions
    cbor += [0x03, 0x50] + aaguid  // aaguid
    cbor += [0x04, 0xA2, 0x62] + Array("uv".utf8) + [0xF5] + [0x69] + Array("clientPin".utf8) + [0xF5]
    cbor += [0x0C, 0xF5]  // forcePINChange
    cbor += [0x0E, 0x1A, 0x00, 0x05, 0x04, 0x03]  // firmwareVersion 0x050403
    cbor += [0x07, 0x08]  // maxCredentialCountInList: not read
    cbor += [0x06, 0x81, 0x02]  // pinUvAuthProtocols [2]
    let info = try #require(FIDO2GetInfo.parse(cbor))
    #expect(
      info
        == FIDO2Info(
          versions: ["FIDO_2_1"], extensions: [], options: ["uv": true, "clientPin": true], pinProtocols: [2],
          minPINLength: 8, forcePINChange: true, aaguid: String(repeating: "AB", count: 16),
          remainingDiscoverableCredentials: nil, firmwareVersion: 0x050403, maxMsgSize: nil))
    #expect(info.pinIsSet)
  }

  @Test func malformedAnswersAreNil() {
    let good = Self.virtualKey
    #expect(FIDO2GetInfo.parse([UInt8]()) == nil)
    #expect(FIDO2GetInfo.parse(good.dropLast()) == nil)  // truncated
    #expect(FIDO2GetInfo.parse(good + [0x00]) == nil)  // trailing bytes
    #expect(FIDO2GetInfo.parse([0x80]) == nil)  // an array, not a map
    #expect(FIDO2GetInfo.parse([0xA0]) == nil)  // no versions, no AAGUID
    // versions as a text string instead of an array of them
    #expect(FIDO2GetInfo.parse([0xA2, 0x01, 0x61, 0x41, 0x03, 0x50] + [UInt8](repeating: 0, count: 16)) == nil)
    // an AAGUID of 15 bytes
    #expect(FIDO2GetInfo.parse([0xA2, 0x01, 0x80, 0x03, 0x4F] + [UInt8](repeating: 0, count: 15)) == nil)
    // an option that is not a boolean
    let base: [UInt8] = [0x01, 0x80, 0x03, 0x50] + [UInt8](repeating: 0, count: 16)
    #expect(FIDO2GetInfo.parse([0xA2] + base) != nil)
    #expect(FIDO2GetInfo.parse([0xA3] + base + [0x04, 0xA1, 0x62, 0x72, 0x6B, 0x01]) == nil)
    #expect(FIDO2GetInfo.parse([0xA3] + base + [0x0D, 0x61, 0x38]) == nil)  // minPINLength as text
    #expect(FIDO2GetInfo.parse([0xA3] + base + [0x0C, 0x01]) == nil)  // forcePINChange as an integer
    #expect(FIDO2GetInfo.parse([0xBF] + base + [0xFF]) == nil)  // indefinite-length map
    #expect(FIDO2GetInfo.parse([UInt8](repeating: 0x81, count: 40) + [0x00]) == nil)  // nested 40 deep
    #expect(FIDO2GetInfo.parse([0x9B] + [UInt8](repeating: 0xFF, count: 8)) == nil)  // 2^64-1 items announced
    #expect(FIDO2GetInfo.parse([0x5B] + [UInt8](repeating: 0xFF, count: 8)) == nil)  // a byte string as long
    // a version string that is not UTF-8
    let badText: [UInt8] = [0xA2, 0x01, 0x81, 0x62, 0xC3, 0x28, 0x03, 0x50] + [UInt8](repeating: 0, count: 16)
    #expect(FIDO2GetInfo.parse(badText) == nil)
  }

  /// Every prefix and every single-byte change of a real answer: nil or a value, never a trap.
  @Test func mutationsNeverTrap() {
    let good = Self.virtualKey
    for n in 0..<good.count { _ = FIDO2GetInfo.parse(good.prefix(n)) }
    for i in 0..<good.count {
      for b: UInt8 in [0x00, 0x1B, 0x3B, 0x5B, 0x7B, 0x9B, 0xBB, 0xDB, 0xFB, 0xFF] {
        var m = good
        m[i] = b
        _ = FIDO2GetInfo.parse(m)
      }
    }
  }
}
