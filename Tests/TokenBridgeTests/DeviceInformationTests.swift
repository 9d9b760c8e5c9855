import Foundation
import SystemCrypto
import Testing
import UAFCore

@testable import TokenBridge

/// The Device-Signature JWS, the mismatch computation, the sync plan, the retry rule and the device keys file.
@Suite struct DeviceInformationTests {
  // MARK: JWS

  func parts(_ jws: String) -> [String] { jws.split(separator: ".", omittingEmptySubsequences: false).map(String.init) }

  @Test func theSignatureIsACompactES256JWSOverHeaderAndPayload() throws {
    let key = P256.Signing.PrivateKey()
    let now = Date(timeIntervalSince1970: 1_700_000_000.123)
    let jws = DeviceSignature.sign(dispatchTargetID: "t-1", key: key, now: now)
    let p = parts(jws)
    #expect(p.count == 3)
    let header = try JSONSerialization.jsonObject(with: Data(try #require(Base64URL.decode(p[0])))) as? [String: String]
    #expect(header == ["alg": "ES256", "typ": "JOSE"])
    let payload = try JSONDecoder().decode(
      DeviceWire.SignedPayload.self, from: Data(try #require(Base64URL.decode(p[1]))))
    #expect(payload.dispatchTargetId == "t-1" && payload.creationTimeInEpochMillis == 1_700_000_000_123)
    #expect(payload.name == nil && payload.target == nil && payload.disablePush == nil)
    #expect((1...64).contains(payload.requestId.count))
    // Raw r||s (RFC 7518 §3.4), over the ASCII of "header.payload", verifiable with the public key alone.
    let raw = try #require(Base64URL.decode(p[2]))
    #expect(raw.count == 64)
    let signature = try P256.Signing.ECDSASignature(rawRepresentation: raw)
    #expect(key.publicKey.isValidSignature(signature, for: Data("\(p[0]).\(p[1])".utf8)))
    // Any other payload under that signature does not verify.
    let other = Base64URL.encode(Array(#"{"dispatchTargetId":"t-2"}"#.utf8))
    #expect(!key.publicKey.isValidSignature(signature, for: Data("\(p[0]).\(other)".utf8)))
  }

  @Test func everySignatureHasItsOwnRequestID() throws {
    let key = P256.Signing.PrivateKey()
    let ids = try (0..<50).map { _ in
      try JSONDecoder().decode(
        DeviceWire.SignedPayload.self,
        from: Data(try #require(Base64URL.decode(parts(DeviceSignature.sign(dispatchTargetID: "t", key: key))[1])))
      ).requestId
    }
    #expect(Set(ids).count == 50)
  }

  @Test func aModificationCarriesTheNewValues() throws {
    let jws = DeviceSignature.sign(
      dispatchTargetID: "t", key: P256.Signing.PrivateKey(), name: "Laptop", target: nil, disablePush: true)
    let payload = try JSONDecoder().decode(
      DeviceWire.SignedPayload.self, from: Data(try #require(Base64URL.decode(parts(jws)[1]))))
    #expect(payload.name == "Laptop" && payload.target == nil && payload.disablePush == true)
  }

  @Test func theJWKsArePublicP256Points() throws {
    let keys = DeviceKeys(signing: P256.Signing.PrivateKey(), encryption: P256.KeyAgreement.PrivateKey())
    let jwk = try #require(
      try JSONSerialization.jsonObject(with: Data(keys.signatureJWK.utf8)) as? [String: String])
    #expect(jwk["kty"] == "EC" && jwk["crv"] == "P-256" && jwk["use"] == "sig" && jwk["d"] == nil)
    let point = [0x04] + (try #require(Base64URL.decode(jwk["x"]!))) + (try #require(Base64URL.decode(jwk["y"]!)))
    #expect(
      try P256.Signing.PublicKey(x963Representation: point).x963Representation
        == keys.signing.publicKey.x963Representation)
    #expect(keys.encryptionJWK.contains(#""use":"enc""#))
  }

  // MARK: Mismatches

  let s = "https://fido.example"
  func target(_ id: String, _ user: String, name: String = "Laptop", push: String? = nil) -> DeviceView.Target {
    .init(id: id, username: user, name: name, pushToken: push)
  }
  func cred(_ user: String, _ key: String, aaid: String = "7B1D#0001") -> DeviceView.Credential {
    .init(username: user, aaid: aaid, keyID: key)
  }

  @Test func equalViewsHaveNoMismatch() {
    let v = DeviceView(targets: [target("t1", "alice", push: "p")], credentials: [cred("alice", "k1")])
    #expect(DeviceInformationCheck.mismatches(server: s, local: v, remote: v).isEmpty)
    // AAIDs compare case-insensitively (hex).
    let lower = DeviceView(targets: v.targets, credentials: [cred("alice", "k1", aaid: "7b1d#0001")])
    #expect(DeviceInformationCheck.mismatches(server: s, local: v, remote: lower).isEmpty)
  }

  @Test func eachKindWithItsFields() {
    let local = DeviceView(
      targets: [target("t1", "alice", push: "mine"), target("t2", "bob")],
      credentials: [cred("alice", "k1"), cred("bob", "k2"), cred("dave", "k4")])
    let remote = DeviceView(
      targets: [target("t1", "alice", name: "Other name", push: "theirs"), target("t3", "carol")],
      credentials: [cred("alice", "k1"), cred("alice", "k3"), cred("dave", "k4")])
    let found = DeviceInformationCheck.mismatches(server: s, local: local, remote: remote)
    #expect(
      found == [
        .missingAuthenticatorInMobileDevice(server: s, username: "alice", aaid: "7B1D#0001", keyID: "k3"),
        .missingAuthenticatorInServer(server: s, username: "bob", aaid: "7B1D#0001", keyID: "k2"),
        .missingDeviceInformationInMobileDevice(server: s, username: "carol", dispatchTargetID: "t3"),
        .deviceNameMismatch(
          server: s, dispatchTargetID: "t1", nameInServer: "Other name", nameInMobileDevice: "Laptop"),
        .fcmRegistrationTokenMismatch(
          server: s, dispatchTargetID: "t1", fcmRegistrationTokenInServer: "theirs",
          fcmRegistrationTokenInMobileDevice: "mine"),
        .missingDeviceInformationInServer(server: s, username: "bob", dispatchTargetID: "t2"),
        // dave has credentials here but no dispatch target was ever made
        .missingDeviceInformationInServer(server: s, username: "dave", dispatchTargetID: nil),
      ])
    #expect(found.map(\.kind).count == 7)
    #expect(
      found[4].fields == [
        "server": s, "dispatchTargetId": "t1", "fcmRegistrationTokenInServer": "theirs",
        "fcmRegistrationTokenInMobileDevice": "mine",
      ])
    #expect(found[6].fields == ["server": s, "username": "dave"])
    #expect(found[0].kind == "MissingAuthenticatorInMobileDevice" && found[0].server == s)
  }

  @Test func aPushTokenOnOneSideOnlyIsAMismatch() {
    let local = DeviceView(targets: [target("t1", "alice")], credentials: [])
    let remote = DeviceView(targets: [target("t1", "alice", push: "p")], credentials: [])
    #expect(
      DeviceInformationCheck.mismatches(server: s, local: local, remote: remote) == [
        .fcmRegistrationTokenMismatch(
          server: s, dispatchTargetID: "t1", fcmRegistrationTokenInServer: "p", fcmRegistrationTokenInMobileDevice: nil)
      ])
  }

  @Test func thePlanFixesEachKindOnceAndSaysWhatItDeletes() {
    let plan = DeviceInformationOperations.plan([
      .missingAuthenticatorInMobileDevice(server: s, username: "a", aaid: "7B1D#0001", keyID: "k3"),
      .missingAuthenticatorInServer(server: s, username: "b", aaid: "7B1D#0001", keyID: "k2"),
      .missingDeviceInformationInMobileDevice(server: s, username: "c", dispatchTargetID: "t3"),
      .missingDeviceInformationInServer(server: s, username: "b", dispatchTargetID: "t2"),
      .deviceNameMismatch(server: s, dispatchTargetID: "t1", nameInServer: "x", nameInMobileDevice: "y"),
      .fcmRegistrationTokenMismatch(
        server: s, dispatchTargetID: "t1", fcmRegistrationTokenInServer: nil, fcmRegistrationTokenInMobileDevice: "p"),
    ])
    #expect(
      plan == [
        .deleteCredentialAtServer(server: s, username: "a", aaid: "7B1D#0001", keyID: "k3"),
        .deleteCredentialOnDevice(server: s, username: "b", aaid: "7B1D#0001", keyID: "k2"),
        .deleteTargetAtServer(server: s, username: "c", dispatchTargetID: "t3"),
        .createTargetAtServer(server: s, username: "b", replacing: "t2"),
        .updateTargetAtServer(server: s, dispatchTargetID: "t1"),
      ])
    #expect(plan.map(\.deletes) == [true, true, true, false, false])
    #expect(
      DeviceInformationOperations.describe(plan[1])
        == "delete on this device: the registration 7B1D#0001 k2 of b at https://fido.example")
  }

  @Test func serverTextInActionLinesIsEscaped() {
    let line = DeviceInformationOperations.describe(
      .deleteTargetAtServer(server: s, username: "eve\u{1B}[2J", dispatchTargetID: "t\u{7}"))
    #expect(line == "delete at the server https://fido.example: the dispatch target t\\u{7} of eve\\u{1B}[2J")
  }

  // MARK: Retry

  @Test func networkFailuresAreRetriedBoundedAndA4xxNever() {
    let policy = RetryPolicy(attempts: 3, firstDelay: 0, maxDelay: 0)
    for (error, tries) in [
      (BackendError.http(503), 3), (.unreachable("refused"), 3), (.timedOut("u"), 3), (.http(400), 1),
      (.http(404), 1), (.malformedAnswer("x"), 1), (.uafStatus(1498, description: nil), 1),
    ] {
      var count = 0
      #expect(throws: error) {
        try policy.run { () throws(BackendError) -> Int in
          count += 1
          throw error
        }
      }
      #expect(count == tries, "\(error)")
    }
    var count = 0
    let v = try? policy.run { () throws(BackendError) -> Int in
      count += 1
      if count < 3 { throw .unreachable("x") }
      return 7
    }
    #expect(v == 7 && count == 3)
  }

  // MARK: Local data

  let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tb-device-\(UUID().uuidString)")

  @Test func deviceKeysAreMadeOnceInAPrivateFile() throws {
    defer { try? FileManager.default.removeItem(at: dir) }
    let data = try LocalData(directory: dir)
    let first = try data.deviceKeys()
    let again = try LocalData(directory: dir).deviceKeys()
    #expect(first.signing.rawRepresentation == again.signing.rawRepresentation)
    #expect(first.encryption.rawRepresentation == again.encryption.rawRepresentation)
    let file = dir.appendingPathComponent("device-keys.json").path
    let mode = try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? NSNumber
    #expect(mode?.intValue == 0o600)
    // Not in the database: it holds no secret.
    let db = try String(contentsOf: URL(fileURLWithPath: data.path), encoding: .isoLatin1)
    #expect(!db.contains(Base64URL.encode(Array(first.signing.rawRepresentation))))
  }

  @Test func aLinkedOrBrokenKeyFileIsRefused() throws {
    defer { try? FileManager.default.removeItem(at: dir) }
    let data = try LocalData(directory: dir)
    let file = dir.appendingPathComponent("device-keys.json")
    try FileManager.default.createSymbolicLink(atPath: file.path, withDestinationPath: "/tmp/elsewhere")
    #expect(throws: LocalDataError.insecure(path: file.path, reason: .symbolicLink)) { try data.deviceKeys() }
    try FileManager.default.removeItem(at: file)
    _ = FileManager.default.createFile(
      atPath: file.path, contents: Data("{}".utf8), attributes: [.posixPermissions: 0o600])
    #expect(throws: LocalDataError.unavailable(path: file.path, reason: "it is not a device key file")) {
      try data.deviceKeys()
    }
  }

  @Test func dispatchTargetsAndDeviceChangesAreKept() throws {
    defer { try? FileManager.default.removeItem(at: dir) }
    let data = try LocalData(directory: dir)
    #expect(throws: LocalDataError.notFound("device information")) {
      try data.changeDevice(name: "x", pushToken: .keep)
    }
    let d = try data.deviceIdentity()
    #expect(try data.deviceIdentity() == d)
    try data.saveDispatchTarget(.init(id: "t1", server: s, username: "alice"))
    try data.saveDispatchTarget(.init(id: "t2", server: s, username: "alice"))  // replaces t1
    #expect(try data.dispatchTargets() == [.init(id: "t2", server: s, username: "alice")])
    let changed = try data.changeDevice(name: "Work", pushToken: .set("p"))
    #expect(changed.name == "Work" && changed.pushToken == "p" && changed.deviceID == d.deviceID)
    #expect(try data.changeDevice(name: nil, pushToken: .disable).pushToken == nil)
    try data.removeDispatchTarget("t2")
    #expect(try data.dispatchTargets().isEmpty)
  }
}
