import SystemCrypto
import Foundation
import Testing
import TokenDevices
import UAFCore

@testable import TokenBridge

/// UAF requests built here, and every answer verified here (signature, final challenge, counter), so the
/// client's own encoding is not what checks it.
enum UAFFixture {
  static let facet = "https://rp.example"
  /// Another appID of the same site whose trusted facets include ours.
  static let otherApp = "https://apps.rp.example/other"

  static func json(_ o: Any) -> String {
    String(decoding: try! JSONSerialization.data(withJSONObject: o), as: UTF8.self)
  }

  static func header(_ op: String, appID: String = facet) -> [String: Any] {
    ["upv": ["major": 1, "minor": 1], "op": op, "appID": appID, "serverData": "sd-\(op)"]
  }

  static func challenge() -> String { Base64URL.encode((0..<32).map { _ in UInt8.random(in: 0...255) }) }

  static func reg(_ username: String, aaid: String) -> String {
    json([
      [
        "header": header("Reg"), "challenge": challenge(), "username": username,
        "policy": ["accepted": [[["aaid": [aaid]]]]],
      ]
    ])
  }

  static func auth(aaid: String) -> String {
    json([["header": header("Auth"), "challenge": challenge(), "policy": ["accepted": [[["aaid": [aaid]]]]]]])
  }

  static func dereg(appID: String, aaid: String, keyID: String) -> String {
    json([["header": header("Dereg", appID: appID), "authenticators": [["aaid": aaid, "keyID": keyID]]]])
  }

  static func facets(_ url: URL) throws -> TrustedFacetsList {
    TrustedFacetsList(trustedFacets: [.init(version: .uaf11, ids: [facet])])
  }

  /// The single assertion of a response message, with its fcParams.
  static func assertion(_ response: String) throws -> (fc: String, bytes: [UInt8]) {
    let array = try #require(try JSONSerialization.jsonObject(with: Data(response.utf8)) as? [[String: Any]])
    let r = try #require(array.first)
    let fc = try #require(r["fcParams"] as? String)
    let a = try #require((r["assertions"] as? [[String: Any]])?.first?["assertion"] as? String)
    return (fc, try #require(Base64URL.decode(a)))
  }

  static func verify(_ signature: [UInt8], over bytes: [UInt8], key: [UInt8]) throws -> Bool {
    let pub = try P256.Signing.PublicKey(x963Representation: key)
    return pub.isValidSignature(
      try P256.Signing.ECDSASignature(derRepresentation: signature), for: SHA256.hash(data: bytes))
  }

  /// Registers through `client`, checks the assertion, confirms locally; returns (keyID, public key).
  static func register(_ client: UAFClient, _ username: String, aaid: String, pin: String) throws -> (String, [UInt8]) {
    let result = try client.process(
      reg(username, aaid: aaid), expecting: .init(op: .reg, username: username), verifier: ScriptedVerifier([pin]),
      accountSelector: nil)
    let (fc, bytes) = try assertion(try #require(result.responseMessage))
    let reg = try RegistrationAssertion(parsing: bytes)
    #expect(reg.finalChallengeHash == Array(SHA256.hash(data: Array(fc.utf8))))
    #expect(reg.aaid == aaid)
    #expect(try verify(reg.signature, over: reg.signedBytes, key: reg.publicKey))  // surrogate: its own key
    let keyID = try #require(result.pendingKeyID)
    #expect(Base64URL.decode(keyID) == reg.keyID)
    try client.localData.confirmRegistration(keyID)
    return (keyID, reg.publicKey)
  }

  /// Authenticates through `client`; checks the signature with `key`; returns the counter.
  static func authenticate(_ client: UAFClient, aaid: String, key: [UInt8], pin: String) throws -> UInt32 {
    let result = try client.process(
      auth(aaid: aaid), expecting: .init(op: .auth), verifier: ScriptedVerifier([pin]), accountSelector: nil)
    let (fc, bytes) = try assertion(try #require(result.responseMessage))
    let a = try AuthenticationAssertion(parsing: bytes)
    #expect(a.finalChallengeHash == Array(SHA256.hash(data: Array(fc.utf8))))
    #expect(try verify(a.signature, over: a.signedBytes, key: key))
    return a.signCounter
  }

  static func localData() throws -> LocalData {
    try LocalData(
      directory: FileManager.default.temporaryDirectory.appendingPathComponent("tb-uaf-\(UUID().uuidString)"))
  }
}

/// The UAF client with a PIV card (through pcscd): part of the serialized PC/SC suite (one vpcd reader).
extension PIVThroughPCSCDTests {
  func client(_ token: DiscoveredToken, _ data: LocalData) -> UAFClient {
    UAFClient(
      configuration: Configuration(), facetID: UAFFixture.facet, server: UAFFixture.facet, localData: data,
      tokens: [token], fetchFacets: UAFFixture.facets)
  }

  @Test func uafClientRegistersAuthenticatesAndDeregistersOnlyItsAppID() throws {
    let card = try VirtualCard(serial: 4_200_020)
    let data = try UAFFixture.localData()
    let c = client(try discovered("piv-4200020"), data)
    let (keyID, key) = try UAFFixture.register(c, "alice", aaid: "7B1D#0001", pin: "123456")
    #expect(try UAFFixture.authenticate(c, aaid: "7B1D#0001", key: key, pin: "123456") == 1)
    #expect(try UAFFixture.authenticate(c, aaid: "7B1D#0001", key: key, pin: "123456") == 2)
    // A Dereg for another appID (whose facets trust us) touches nothing.
    let other = try c.process(
      UAFFixture.dereg(appID: UAFFixture.otherApp, aaid: "", keyID: ""), expecting: nil,
      verifier: ScriptedVerifier([]), accountSelector: nil)
    #expect(other.removed.isEmpty && other.op == .dereg)
    #expect(try data.authenticators().map(\.keyID) == [keyID])
    let mine = try c.process(
      UAFFixture.dereg(appID: UAFFixture.facet, aaid: "7B1D#0001", keyID: keyID), expecting: nil,
      verifier: ScriptedVerifier([]), accountSelector: nil)
    #expect(mine.removed == [keyID])
    #expect(try data.authenticators().isEmpty)
    _ = card
  }

  @Test func uafClientRefusesAnotherOperationAndAnotherUserBeforeTheToken() throws {
    let card = try VirtualCard(serial: 4_200_021)
    let data = try UAFFixture.localData()
    let c = client(try discovered("piv-4200021"), data)
    let (keyID, _) = try UAFFixture.register(c, "alice", aaid: "7B1D#0001", pin: "123456")
    // A Dereg answer to a registration is refused before anything is processed.
    #expect(throws: OperationError.message(.unexpectedOperation(expected: .reg, got: .dereg))) {
      try c.process(
        UAFFixture.dereg(appID: UAFFixture.facet, aaid: "", keyID: ""), expecting: .init(op: .reg, username: "bob"),
        verifier: ScriptedVerifier([]), accountSelector: nil)
    }
    // A registration for another user than the one asked is refused.
    let verifier = ScriptedVerifier(["123456"])
    #expect(throws: OperationError.usernameMismatch(asked: "alice", got: "mallory")) {
      try c.process(
        UAFFixture.reg("mallory", aaid: "7B1D#0001"), expecting: .init(op: .reg, username: "alice"),
        verifier: verifier, accountSelector: nil)
    }
    #expect(verifier.contexts.isEmpty)  // no PIN was asked
    #expect(try data.authenticators(includeAll: true).map(\.keyID) == [keyID])
    #expect(try card.open().pinStatus(.pin).retriesLeft == 3)
  }

  @Test func pivAuthenticatorWrongPINIsRecoverableAndLeavesNoPendingRecord() throws {
    let card = try VirtualCard(serial: 4_200_022)
    let data = try UAFFixture.localData()
    let c = client(try discovered("piv-4200022"), data)
    let verifier = ScriptedVerifier(["000000", "12345"])  // a wrong one, one the format refuses, then cancel
    #expect(throws: OperationError.cancelled) {
      try c.process(
        UAFFixture.reg("alice", aaid: "7B1D#0001"), expecting: .init(op: .reg, username: "alice"),
        verifier: verifier, accountSelector: nil)
    }
    #expect(
      verifier.contexts.map(\.lastRecoverableError) == [
        nil, .wrong(.pin, retriesLeft: 2), .invalidCurrent(.pin, .tooShort(minimum: 6)),
      ])
    #expect(try card.open().pinStatus(.pin).retriesLeft == 2)  // the format refusal spent nothing
    #expect(try data.authenticators(includeAll: true).isEmpty)  // nothing reached the slot: no claim on it
  }
}

/// A FIDO2 key (virtual, through libfido2's custom I/O) as a UAF authenticator, and its password change.
@Suite(.tags(.pcscd), .serialized, .enabled(if: hasPrivatePCSCD, "needs the private pcscd: run Tools/test"))
struct FIDO2AuthenticatorTests {
  func discovered(_ key: VirtualFIDO2Key) throws -> DiscoveredFIDO2 {
    var d = TokenDiscovery(includePUK: false)
    d.virtualFIDO2Paths = [key.path]
    return try #require(try d.discover().fido2Found.first { $0.info.reader == key.path })
  }

  final class Notifier: ReinsertionNotifier {
    func reinsertionNeeded(_ token: TokenInfo) {}
    func reinserted(_ token: TokenInfo) {}
  }

  @Test func fido2KeyRegistersAndAuthenticatesAsAUAFAuthenticator() throws {
    let key = try VirtualFIDO2Key()
    try FIDO2Session(key.ref).setPIN(Array("1234".utf8), old: nil)
    let data = try UAFFixture.localData()
    var c = UAFClient(
      configuration: Configuration(), facetID: UAFFixture.facet, server: UAFFixture.facet, localData: data,
      tokens: [], fetchFacets: UAFFixture.facets)
    c.fido2Keys = [try discovered(key)]
    let (_, pub) = try UAFFixture.register(c, "alice", aaid: "7B1D#0002", pin: "1234")
    #expect(try UAFFixture.authenticate(c, aaid: "7B1D#0002", key: pub, pin: "1234") == 1)
    // A wrong PIN is recoverable and shows the tries the key reports.
    let verifier = ScriptedVerifier(["9999", "1234"])
    _ = try c.process(
      UAFFixture.auth(aaid: "7B1D#0002"), expecting: .init(op: .auth), verifier: verifier, accountSelector: nil)
    #expect(verifier.contexts.map(\.lastRecoverableError) == [nil, .wrong(.pin, retriesLeft: 7)])
  }

  @Test func passwordChangeChecksFirstAndRecoversFromAWrongPIN() throws {
    let key = try VirtualFIDO2Key()
    try FIDO2Session(key.ref).setPIN(Array("1234".utf8), old: nil)
    let changer = ScriptedChanger([("1234", "12"), ("9999", "5678"), ("1234", "5678")])
    try PasswordChange().changePIN(on: try discovered(key), changer: changer, notifier: Notifier())
    #expect(
      changer.contexts.map(\.lastRecoverableError) == [
        nil, .invalidNew(.pin, .tooShort(minimum: 4)), .wrong(.pin, retriesLeft: 7),
      ])
    #expect(try FIDO2Session(key.ref).pinRetries() == 8)  // the right PIN resets the count
    let again = ScriptedChanger([("5678", "4321")])
    try PasswordChange().changePIN(on: try discovered(key), changer: again, notifier: Notifier())
  }
}
