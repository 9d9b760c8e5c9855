import SystemCrypto
import Foundation
import Testing

@testable import VirtualTokens

/// The virtual key's discoverable credentials, credential management (0x0A and the 0x41 preview alias) and
/// reset rules, driven through `handle` as a platform would (PIN protocol 2 from the platform side).
@Suite struct VirtualFIDO2KeyTests {
  /// The platform side of PIN protocol 2 against `key`.
  struct Platform {
    let key: VirtualFIDO2Key
    let own = P256.KeyAgreement.PrivateKey()
    let proto = PinProtocol(version: 2)
    var shared: [UInt8] = []

    init(_ key: VirtualFIDO2Key) {
      self.key = key
      let reply = key.handle([0x06] + CBOR.map((.int(1), .int(2)), (.int(2), .int(2))).encoded())
      let peer = try! CBOR.decode(Array(reply.dropFirst()))[int: 1]!
      shared = proto.sharedSecret(own, peer: peer)!
    }

    var cose: CBOR { coseKey(own.publicKey.x963Representation, alg: -25) }

    func setPIN(_ pin: String) -> UInt8 {
      let padded = Array(pin.utf8) + [UInt8](repeating: 0, count: 64 - pin.utf8.count)
      let enc = proto.encrypt(shared, padded)!
      return key.handle(
        [0x06]
          + CBOR.map(
            (.int(1), .int(2)), (.int(2), .int(3)), (.int(3), cose), (.int(4), .bytes(proto.authenticate(shared, enc))),
            (.int(5), .bytes(enc))
          ).encoded())[0]
    }

    /// getPinUvAuthTokenUsingPinWithPermissions; returns the token.
    func token(_ pin: String, permissions: Int, rpID: String? = nil) -> [UInt8] {
      let hash = Array(SHA256.hash(data: Array(pin.utf8)).prefix(16))
      var pairs: [(CBOR, CBOR)] = [
        (.int(1), .int(2)), (.int(2), .int(9)), (.int(3), cose), (.int(6), .bytes(proto.encrypt(shared, hash)!)),
        (.int(9), .int(permissions)),
      ]
      if let rpID { pairs.append((.int(10), .text(rpID))) }
      let reply = key.handle([0x06] + CBOR.map(pairs.map { CBORPair(key: $0.0, value: $0.1) }).encoded())
      #expect(reply[0] == 0)
      return proto.decrypt(shared, try! CBOR.decode(Array(reply.dropFirst()))[int: 2]!.bytes!)!
    }
  }

  func makeResident(_ key: VirtualFIDO2Key, _ p: Platform, rp: String, user: [UInt8], name: String) -> [UInt8] {
    let token = p.token("1234", permissions: 0x01, rpID: rp)
    let cdh = [UInt8](repeating: 7, count: 32)
    let reply = key.handle(
      [0x01]
        + CBOR.map(
          (.int(1), .bytes(cdh)), (.int(2), .map((.text("id"), .text(rp)))),
          (.int(3), .map((.text("id"), .bytes(user)), (.text("name"), .text(name)))),
          (.int(4), .array([.map((.text("alg"), .int(-7)), (.text("type"), .text("public-key")))])),
          (.int(7), .map((.text("rk"), .bool(true)))),
          (.int(8), .bytes(p.proto.authenticate(token, cdh, isToken: true))),
          (.int(9), .int(2))
        ).encoded())
    #expect(reply[0] == 0)
    return key.state.credentials.last!.id.map { $0 }
  }

  func credMgmt(
    _ key: VirtualFIDO2Key, _ p: Platform, _ token: [UInt8]?, sub: Int, params: CBOR? = nil, command: UInt8 = 0x0A
  ) -> (UInt8, CBOR?) {
    var pairs: [(CBOR, CBOR)] = [(.int(1), .int(sub))]
    if let params { pairs.append((.int(2), params)) }
    if let token {
      let message = [UInt8(sub)] + (params?.encoded() ?? [])
      pairs += [(.int(3), .int(2)), (.int(4), .bytes(p.proto.authenticate(token, message, isToken: true)))]
    }
    let reply = key.handle([command] + CBOR.map(pairs.map { CBORPair(key: $0.0, value: $0.1) }).encoded())
    return (reply[0], reply.count > 1 ? try! CBOR.decode(Array(reply.dropFirst())) : nil)
  }

  @Test func getInfoAnnouncesCredentialManagementAndRoom() throws {
    let key = VirtualFIDO2Key(state: .factory())
    let info = try CBOR.decode(Array(key.handle([0x04]).dropFirst()))
    #expect(info[int: 4]?[text: "credMgmt"] == .bool(true))
    #expect(info[int: 4]?[text: "credentialMgmtPreview"] == .bool(true))
    #expect(info[int: 1]?.array?.contains(.text("FIDO_2_1_PRE")) == true)
    #expect(info[int: 0x14]?.int == FIDO2State.maxResident)
  }

  @Test func enumeratesAndDeletesWithACmToken() {
    let key = VirtualFIDO2Key(state: .factory())
    var p = Platform(key)
    #expect(p.setPIN("1234") == 0)
    p = Platform(key)
    let a = makeResident(key, p, rp: "a.example", user: [1], name: "alice")
    _ = makeResident(key, p, rp: "b.example", user: [2], name: "bob")
    _ = makeResident(key, p, rp: "a.example", user: [1], name: "alice again")  // replaces alice's
    #expect(key.state.residentCount == 2)
    #expect(!key.state.credentials.contains { $0.id == Data(a) })

    // No token, or a token without cm: refused.
    #expect(credMgmt(key, p, nil, sub: 1).0 == CTAP2Status.puatRequired.rawValue)
    let mc = p.token("1234", permissions: 0x01)
    #expect(credMgmt(key, p, mc, sub: 1).0 == CTAP2Status.pinAuthInvalid.rawValue)

    let cm = p.token("1234", permissions: 0x04)
    let meta = credMgmt(key, p, cm, sub: 1)
    #expect(meta.0 == 0 && meta.1?[int: 1]?.int == 2 && meta.1?[int: 2]?.int == FIDO2State.maxResident - 2)
    let first = credMgmt(key, p, cm, sub: 2, command: 0x41)  // the preview alias answers the same
    #expect(first.0 == 0 && first.1?[int: 5]?.int == 2)
    let second = credMgmt(key, p, nil, sub: 3)
    #expect(second.0 == 0)
    #expect(credMgmt(key, p, nil, sub: 3).0 == CTAP2Status.notAllowed.rawValue)  // nothing left
    let rpIDs = [first.1, second.1].compactMap { $0?[int: 3]?[text: "id"]?.text }.sorted()
    #expect(rpIDs == ["a.example", "b.example"])

    let hashA = CBOR.bytes(Array(SHA256.hash(data: Array("a.example".utf8))))
    let creds = credMgmt(key, p, cm, sub: 4, params: .map((.int(1), hashA)))
    #expect(creds.0 == 0 && creds.1?[int: 9]?.int == 1 && creds.1?[int: 6]?[text: "name"]?.text == "alice again")
    let id = creds.1![int: 7]![text: "id"]!
    let del = CBOR.map((.int(2), .map((.text("id"), id), (.text("type"), .text("public-key")))))
    #expect(credMgmt(key, p, cm, sub: 6, params: del).0 == 0)
    #expect(key.state.residentCount == 1)
    #expect(credMgmt(key, p, cm, sub: 6, params: del).0 == CTAP2Status.noCredentials.rawValue)
  }

  @Test func aTokenBoundToAnRPManagesOnlyThatRP() {
    let key = VirtualFIDO2Key(state: .factory())
    #expect(Platform(key).setPIN("1234") == 0)
    let p = Platform(key)
    _ = makeResident(key, p, rp: "a.example", user: [1], name: "alice")
    let bound = p.token("1234", permissions: 0x04, rpID: "a.example")
    let hash = { (rp: String) in CBOR.map((.int(1), .bytes(Array(SHA256.hash(data: Array(rp.utf8)))))) }
    #expect(credMgmt(key, p, bound, sub: 4, params: hash("a.example")).0 == 0)
    #expect(credMgmt(key, p, bound, sub: 4, params: hash("b.example")).0 == CTAP2Status.pinAuthInvalid.rawValue)
    #expect(credMgmt(key, p, bound, sub: 1).0 == CTAP2Status.pinAuthInvalid.rawValue)
  }

  @Test func aFullKeyRefusesAnotherDiscoverableCredential() {
    var state = FIDO2State.factory()
    let filler = FIDO2State.Credential(
      id: Data([0]), rpIDHash: Data(count: 32), privateKey: P256.Signing.PrivateKey().rawRepresentation,
      credRandomWithUV: Data(count: 32), credRandomWithoutUV: Data(count: 32), userID: Data([9]), hmacSecret: false,
      resident: true)
    state.credentials = (0..<FIDO2State.maxResident).map { i in
      var c = filler
      c.id = Data([UInt8(i)])
      c.userID = Data([UInt8(i)])
      return c
    }
    let key = VirtualFIDO2Key(state: state)
    #expect(Platform(key).setPIN("1234") == 0)
    let p = Platform(key)
    let token = p.token("1234", permissions: 0x01, rpID: "a.example")
    let cdh = [UInt8](repeating: 1, count: 32)
    let reply = key.handle(
      [0x01]
        + CBOR.map(
          (.int(1), .bytes(cdh)), (.int(2), .map((.text("id"), .text("a.example")))),
          (.int(3), .map((.text("id"), .bytes([0xAA])))),
          (.int(4), .array([.map((.text("alg"), .int(-7)), (.text("type"), .text("public-key")))])),
          (.int(7), .map((.text("rk"), .bool(true)))),
          (.int(8), .bytes(p.proto.authenticate(token, cdh, isToken: true))),
          (.int(9), .int(2))
        ).encoded())
    #expect(reply == [CTAP2Status.keyStoreFull.rawValue])
  }

  /// A getAssertion without pinUvAuthParam on a key with a PIN goes on without UV (CTAP 2.1 §6.2.2): the
  /// silent probe (up=false) that tells whether a key knows a credential needs no PIN, even a blocked one.
  @Test func silentProbeNeedsNoPIN() {
    let key = VirtualFIDO2Key(state: .factory())
    #expect(Platform(key).setPIN("1234") == 0)
    let id = makeResident(key, Platform(key), rp: "a.example", user: [1], name: "alice")
    key.state.pinRetries = 0  // blocked
    func probe(_ cred: [UInt8]) -> UInt8 {
      key.handle(
        [0x02]
          + CBOR.map(
            (.int(1), .text("a.example")), (.int(2), .bytes([UInt8](repeating: 0, count: 32))),
            (.int(3), .array([.map((.text("id"), .bytes(cred)), (.text("type"), .text("public-key")))])),
            (.int(5), .map((.text("up"), .bool(false))))
          ).encoded())[0]
    }
    #expect(probe(id) == 0)
    #expect(probe([1, 2, 3]) == CTAP2Status.noCredentials.rawValue)
  }

  @Test func resetOnlyInsideTheWindowAndWithATouch() {
    var state = FIDO2State.factory()
    state.pinHash = Data(count: 16)
    let key = VirtualFIDO2Key(state: state)
    key.resetWindow = 0
    #expect(key.handle([0x07]) == [CTAP2Status.notAllowed.rawValue])
    #expect(key.state == state)
    key.resetWindow = 10
    key.presence = .deny
    #expect(key.handle([0x07]) == [CTAP2Status.operationDenied.rawValue])
    key.presence = .timeout
    #expect(key.handle([0x07]) == [CTAP2Status.userActionTimeout.rawValue])
    #expect(key.state == state)
    key.presence = .auto
    #expect(key.handle([0x07]) == [0])
    #expect(key.state.pinHash == nil && key.state.aaguid == state.aaguid)
  }

  @Test func powerCycleRestartsTheWindow() {
    let key = VirtualFIDO2Key(state: .factory())
    key.poweredAt = Date().addingTimeInterval(-20)  // long past
    #expect(key.handle([0x07]) == [CTAP2Status.notAllowed.rawValue])
    key.powerCycle()  // the lead's USB/IP attach calls this
    #expect(key.handle([0x07]) == [0])
  }
}
