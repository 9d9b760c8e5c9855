import SystemCrypto
import Foundation
import Testing

@testable import VirtualTokens

/// The virtual key's profiles (FIDO2Profile): what each says in getInfo and how it answers where the firmwares
/// differ (solo1: FIDO_2_1_PRE without pinUvAuthToken, CTAP1_ERR_OTHER, no powerCycleState, empty credential
/// management answers, a firmware-wide lockout; CanoKey: no powerCycleState, makeCredUvNotRqd), driven through
/// `handle` with PIN protocol 1 from the platform side, as a CTAP 2.0 platform would.
@Suite struct FIDO2ProfileTests {
  static let other: UInt8 = 0x7F

  func key(_ profile: FIDO2Profile) -> VirtualFIDO2Key {
    let k = VirtualFIDO2Key(state: .factory())
    k.profile = profile
    return k
  }

  func request(_ command: UInt8, _ pairs: [(CBOR, CBOR)]) -> [UInt8] {
    [command] + CBOR.map(pairs.map { CBORPair(key: $0.0, value: $0.1) }).encoded()
  }

  func body(_ reply: [UInt8]) throws -> CBOR { try CBOR.decode(Array(reply.dropFirst())) }

  /// The platform side of PIN protocol 1 (a fresh key agreement: the key makes a new one after a wrong PIN).
  struct Host {
    let key: VirtualFIDO2Key
    let own = P256.KeyAgreement.PrivateKey()
    let proto = PinProtocol(version: 1)
    let shared: [UInt8]

    init(_ key: VirtualFIDO2Key) {
      self.key = key
      let reply = key.handle([0x06] + CBOR.map((.int(1), .int(1)), (.int(2), .int(2))).encoded())
      let peer = try! CBOR.decode(Array(reply.dropFirst()))[int: 1]!
      shared = proto.sharedSecret(own, peer: peer)!
    }

    var cose: CBOR { coseKey(own.publicKey.x963Representation, alg: -25) }

    func setPIN(_ pin: String) -> UInt8 {
      let enc = proto.encrypt(shared, Array(pin.utf8) + [UInt8](repeating: 0, count: 64 - pin.utf8.count))!
      return key.handle(
        [0x06]
          + CBOR.map(
            (.int(1), .int(1)), (.int(2), .int(3)), (.int(3), cose),
            (.int(4), .bytes(proto.authenticate(shared, enc))), (.int(5), .bytes(enc))
          ).encoded())[0]
    }

    /// The legacy getPinToken (0x05), or 0x09 with `permissions`: status and the decrypted token.
    func token(_ pin: String, sub: Int = 5, permissions: Int? = nil) -> (UInt8, [UInt8]?) {
      let hash = Array(SHA256.hash(data: Array(pin.utf8)).prefix(16))
      var pairs: [(CBOR, CBOR)] = [
        (.int(1), .int(1)), (.int(2), .int(sub)), (.int(3), cose), (.int(6), .bytes(proto.encrypt(shared, hash)!)),
      ]
      if let permissions { pairs.append((.int(9), .int(permissions))) }
      let reply = key.handle([0x06] + CBOR.map(pairs.map { CBORPair(key: $0.0, value: $0.1) }).encoded())
      guard reply[0] == 0, let enc = try? CBOR.decode(Array(reply.dropFirst()))[int: 2]?.bytes else {
        return (reply[0], nil)
      }
      return (0, proto.decrypt(shared, enc))
    }
  }

  func retries(_ key: VirtualFIDO2Key) throws -> CBOR {
    let reply = key.handle(request(0x06, [(.int(1), .int(1)), (.int(2), .int(1))]))
    #expect(reply[0] == 0)
    return try body(reply)
  }

  func makeCredential(_ key: VirtualFIDO2Key, token: [UInt8]?, rk: Bool, user: [UInt8] = [1], name: String = "alice")
    -> UInt8
  {
    let cdh = [UInt8](repeating: 7, count: 32)
    var pairs: [(CBOR, CBOR)] = [
      (.int(1), .bytes(cdh)), (.int(2), .map((.text("id"), .text("a.example")), (.text("name"), .text("A")))),
      (.int(3), .map((.text("id"), .bytes(user)), (.text("name"), .text(name)))),
      (.int(4), .array([.map((.text("alg"), .int(-7)), (.text("type"), .text("public-key")))])),
      (.int(7), .map((.text("rk"), .bool(rk)))),
    ]
    if let token {
      pairs += [(.int(8), .bytes(PinProtocol(version: 1).authenticate(token, cdh, isToken: true))), (.int(9), .int(1))]
    }
    return key.handle(request(0x01, pairs))[0]
  }

  func credMgmt(_ key: VirtualFIDO2Key, _ token: [UInt8]?, sub: Int, command: UInt8 = 0x0A) -> [UInt8] {
    var pairs: [(CBOR, CBOR)] = [(.int(1), .int(sub))]
    if let token {
      pairs += [(.int(3), .int(1)), (.int(4), .bytes(PinProtocol(version: 1).authenticate(token, [UInt8(sub)])))]
    }
    return key.handle(request(command, pairs))
  }

  func keyWithPIN(_ profile: FIDO2Profile) -> VirtualFIDO2Key {
    let k = key(profile)
    #expect(Host(k).setPIN("1234") == 0)
    return k
  }

  // MARK: getInfo

  @Test func solo1GetInfoIsACTAP20KeyWithThePreview() throws {
    let info = try body(key(.solo1).handle([0x04]))
    #expect(info[int: 1] == .array([.text("U2F_V2"), .text("FIDO_2_0"), .text("FIDO_2_1_PRE")]))
    let options = try #require(info[int: 4])
    #expect(options[text: "pinUvAuthToken"] == nil)
    #expect(options[text: "credMgmt"] == .bool(true))
    #expect(options[text: "credentialMgmtPreview"] == nil)
    #expect(options[text: "clientPin"] == .bool(false))
    #expect(info[int: 6] == .array([.int(1)]))
    #expect(info[int: 7]?.int == 20)
    #expect(info[int: 8]?.int == 128)
    for absent in [12, 13, 0x14] { #expect(info[int: absent] == nil) }
  }

  @Test func canokeyGetInfoIsCTAP21WithMakeCredUvNotRqd() throws {
    let info = try body(key(.canokey).handle([0x04]))
    #expect(info[int: 1] == .array([.text("U2F_V2"), .text("FIDO_2_0"), .text("FIDO_2_1")]))
    #expect(info[int: 4]?[text: "pinUvAuthToken"] == .bool(true))
    #expect(info[int: 4]?[text: "makeCredUvNotRqd"] == .bool(true))
    #expect(info[int: 4]?[text: "up"] == nil)
    #expect(info[int: 6] == .array([.int(1), .int(2)]))
    #expect(info[int: 0x14] == nil)
  }

  @Test func ctap21GetInfoIsUnchanged() throws {
    let info = try body(key(.ctap21).handle([0x04]))
    #expect(info[int: 1] == .array([.text("FIDO_2_0"), .text("FIDO_2_1_PRE"), .text("FIDO_2_1")]))
    #expect(info[int: 4]?[text: "pinUvAuthToken"] == .bool(true))
    #expect(info[int: 4]?[text: "credentialMgmtPreview"] == .bool(true))
    #expect(info[int: 6] == .array([.int(2), .int(1)]))
    #expect(info[int: 7] == nil)
    #expect(info[int: 0x14]?.int == FIDO2State.maxResident)
  }

  // MARK: clientPIN

  @Test func solo1RefusesUnknownPINRequestsWithCTAP1ErrOtherWithoutSpendingATry() throws {
    let k = keyWithPIN(.solo1)
    let host = Host(k)
    #expect(host.token("1234", sub: 9, permissions: 0x02).0 == Self.other)
    #expect(k.handle(request(0x06, [(.int(1), .int(1)), (.int(2), .int(0x0A))]))[0] == Self.other)
    #expect(k.handle(request(0x06, [(.int(1), .int(2)), (.int(2), .int(2))]))[0] == Self.other)  // protocol 2
    #expect(k.handle(request(0x06, [(.int(1), .int(2)), (.int(2), .int(1))]))[0] == Self.other)  // retries too
    #expect(k.state.pinRetries == 8)
    #expect(k.handle([0x0B]) == [CTAP2Status.invalidCommand.rawValue])  // unknown command (no selection)
    let ctap20 = keyWithPIN(.ctap20)
    #expect(Host(ctap20).token("1234", sub: 9, permissions: 0x02).0 == CTAP2Status.invalidParameter.rawValue)
  }

  @Test func getPINRetriesWithoutPowerCycleState() throws {
    #expect(try retries(key(.ctap21)) == .map((.int(3), .int(8)), (.int(4), .bool(false))))
    #expect(try retries(key(.solo1)) == .map((.int(3), .int(8))))
    #expect(try retries(key(.canokey)) == .map((.int(3), .int(8))))
    let flagged = key(.ctap21)
    flagged.omitsPowerCycleState = true
    #expect(try retries(flagged) == .map((.int(3), .int(8))))
  }

  @Test func solo1SetPINOnAKeyWithAPINIsNotAllowed() {
    #expect(Host(keyWithPIN(.solo1)).setPIN("5678") == CTAP2Status.notAllowed.rawValue)
    #expect(Host(keyWithPIN(.ctap21)).setPIN("5678") == CTAP2Status.pinAuthInvalid.rawValue)
  }

  /// solo1: three wrong PINs lock the whole firmware until a power cycle (getAssertion without a PIN too); the
  /// wrong PIN that spends the last try answers PIN_INVALID, only the next request PIN_BLOCKED.
  @Test func solo1LockoutAndTheLastTry() throws {
    let k = keyWithPIN(.solo1)
    let assertion = request(0x02, [(.int(1), .text("a.example")), (.int(2), .bytes([UInt8](repeating: 1, count: 32)))])
    #expect(k.handle(assertion) == [CTAP2Status.noCredentials.rawValue])
    #expect(Host(k).token("0000").0 == CTAP2Status.pinInvalid.rawValue)
    #expect(Host(k).token("0000").0 == CTAP2Status.pinInvalid.rawValue)
    #expect(Host(k).token("0000").0 == CTAP2Status.pinAuthBlocked.rawValue)
    #expect(k.handle(assertion) == [CTAP2Status.pinAuthBlocked.rawValue])
    #expect(Host(k).token("1234").0 == CTAP2Status.pinAuthBlocked.rawValue)
    #expect(try retries(k) == .map((.int(3), .int(5))))  // and nothing says a power cycle is needed
    k.powerCycle()
    #expect(k.handle(assertion) == [CTAP2Status.noCredentials.rawValue])
    for expected in [CTAP2Status.pinInvalid, .pinInvalid, .pinAuthBlocked] {
      #expect(Host(k).token("0000").0 == expected.rawValue)
    }
    k.powerCycle()
    #expect(Host(k).token("0000").0 == CTAP2Status.pinInvalid.rawValue)
    #expect(Host(k).token("0000").0 == CTAP2Status.pinInvalid.rawValue)  // the last try: not PIN_BLOCKED yet
    #expect(k.state.pinRetries == 0)
    #expect(Host(k).token("1234").0 == CTAP2Status.pinBlocked.rawValue)
    #expect(k.handle(assertion) == [CTAP2Status.pinBlocked.rawValue])

    let spec = keyWithPIN(.ctap21)
    for _ in 0..<3 { _ = Host(spec).token("0000") }
    #expect(spec.handle(assertion) == [CTAP2Status.noCredentials.rawValue])  // CTAP 2.1: only PIN commands wait
  }

  // MARK: tokens, makeCredential

  @Test func solo1LegacyTokenServesMakeCredentialAssertionAndManagement() throws {
    let k = keyWithPIN(.solo1)
    let (status, token) = Host(k).token("1234")
    #expect(status == 0)
    let t = try #require(token)
    #expect(t.count == 16)  // solo1's PIN_TOKEN_SIZE
    #expect(makeCredential(k, token: t, rk: true) == 0)
    #expect(credMgmt(k, t, sub: 1)[0] == 0)
    let spec = keyWithPIN(.ctap21)
    let specToken = try #require(Host(spec).token("1234").1)
    #expect(specToken.count == 32)
    #expect(makeCredential(spec, token: specToken, rk: true) == 0)
    #expect(credMgmt(spec, specToken, sub: 1)[0] == CTAP2Status.pinAuthInvalid.rawValue)  // mc|ga only
  }

  @Test func canokeyMakesANonDiscoverableCredentialWithoutAToken() {
    let k = keyWithPIN(.canokey)
    #expect(makeCredential(k, token: nil, rk: false) == 0)
    #expect(makeCredential(k, token: nil, rk: true) == CTAP2Status.puatRequired.rawValue)
    #expect(makeCredential(keyWithPIN(.ctap21), token: nil, rk: false) == CTAP2Status.puatRequired.rawValue)
  }

  // MARK: credential management

  /// solo1 without discoverable credentials: enumerateRPsBegin (and the other subcommands) answer success with an
  /// empty body, after the token check; getCredsMetadata answers as usual.
  @Test func solo1EmptyCredentialManagementAnswers() throws {
    let k = keyWithPIN(.solo1)
    let token = try #require(Host(k).token("1234").1)
    for command: UInt8 in [0x0A, 0x41] {
      #expect(credMgmt(k, token, sub: 2, command: command) == [0x00])
      #expect(credMgmt(k, nil, sub: 3, command: command) == [0x00])
    }
    #expect(credMgmt(k, [UInt8](repeating: 0, count: 16), sub: 2) == [CTAP2Status.pinAuthInvalid.rawValue])
    let metadata = credMgmt(k, token, sub: 1)
    #expect(metadata[0] == 0)
    #expect(try body(metadata) == .map((.int(1), .int(0)), (.int(2), .int(FIDO2State.maxResident))))

    let spec = keyWithPIN(.ctap21)
    let specToken = try #require(Host(spec).token("1234", sub: 9, permissions: 0x04).1)
    #expect(credMgmt(spec, specToken, sub: 2) == [CTAP2Status.noCredentials.rawValue])
  }

  @Test func solo1NamesAnRPByItsUserName() throws {
    let k = keyWithPIN(.solo1)
    let token = try #require(Host(k).token("1234").1)
    #expect(makeCredential(k, token: token, rk: true, name: "alice") == 0)
    let reply = credMgmt(k, token, sub: 2)
    #expect(reply[0] == 0)
    #expect(try body(reply)[int: 3] == .map((.text("id"), .text("a.example")), (.text("name"), .text("alice"))))
  }
}
