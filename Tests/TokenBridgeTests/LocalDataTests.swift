import Foundation
import Testing

@testable import TokenBridge

/// Local data on a real SQLite file, no token needed.
@Suite struct LocalDataTests {
  let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tb-local-\(UUID().uuidString)")

  func record(_ keyID: String, slot: Int, state: AuthenticatorRecord.State = .pending) -> AuthenticatorRecord {
    AuthenticatorRecord(
      keyID: keyID, aaid: "7B1D#0001", username: "alice", server: "https://rp.example", appID: "https://rp.example",
      tokenID: "piv-1", slot: slot, publicKey: Data(), signCounter: 0, state: state, createdAt: Date(),
      credentialID: nil, hmacSalt: nil)
  }

  @Test func filesArePrivate() throws {
    let data = try LocalData(directory: dir)
    defer { try? FileManager.default.removeItem(at: dir) }
    let file = try FileManager.default.attributesOfItem(atPath: data.path)[.posixPermissions] as? NSNumber
    let folder = try FileManager.default.attributesOfItem(atPath: dir.path)[.posixPermissions] as? NSNumber
    #expect(file?.intValue == 0o600 && folder?.intValue == 0o700)
  }

  @Test func registrationLifecycle() throws {
    let data = try LocalData(directory: dir)
    defer { try? FileManager.default.removeItem(at: dir) }
    #expect(try data.reserveSlot(candidates: [0x82], record: record("k1", slot: -1)) == 0x82)
    #expect(try data.authenticators().isEmpty)  // pending is not a registration
    try data.confirmRegistration("k1")
    #expect(try data.authenticators().map(\.keyID) == ["k1"])
    #expect(try data.accounts() == [Account(username: "alice", server: "https://rp.example")])
    #expect(try data.nextSignCounter("k1") == 1)
    #expect(try data.nextSignCounter("k1") == 2)
    try data.delete("k1")
    #expect(try data.authenticators().isEmpty)
    // The slot is still ours, free, and a new registration takes it over.
    #expect(try data.slotAssignments(tokenID: "piv-1") == [0x82: SlotAssignment(tokenID: "piv-1", slot: 0x82)])
    #expect(try data.authenticators(includeAll: true).map { [$0.slot: $0.state] } == [[0x82: .abandoned]])
    #expect(try data.reserveSlot(candidates: [0x82], record: record("k2", slot: -1)) == 0x82)
    #expect(try data.slotAssignments(tokenID: "piv-1")[0x82]?.keyID == "k2")
    #expect(throws: LocalDataError.notFound("nope")) { try data.delete("nope") }
    #expect(throws: LocalDataError.notFound("nope")) { try data.confirmRegistration("nope") }
  }

  @Test func deviceInformationLivesFromFirstToLastRegistration() throws {
    let data = try LocalData(directory: dir)
    defer { try? FileManager.default.removeItem(at: dir) }
    _ = try data.reserveSlot(candidates: [0x82], record: record("k1", slot: -1))
    #expect(try data.deviceInformation() == nil)  // pending is not enough
    try data.confirmRegistration("k1")
    let device = try #require(try data.deviceInformation())
    _ = try data.reserveSlot(candidates: [0x82, 0x83], record: record("k2", slot: -1))
    try data.confirmRegistration("k2")
    #expect(try data.deviceInformation() == device)  // one per machine, stable
    try data.delete("k1")
    #expect(try data.deviceInformation() == device)
    try data.delete("k2")
    #expect(try data.deviceInformation() == nil)
  }

  @Test func interruptedRegistrationsAreRepairedOnce() throws {
    let gone = try LocalData(directory: dir, owner: try ChildProcess.exited())
    defer { try? FileManager.default.removeItem(at: dir) }
    _ = try gone.reserveSlot(candidates: [0x82], record: record("k1", slot: -1))
    _ = try gone.reserveSlot(candidates: [0x83], record: record("k2", slot: -1))
    try gone.confirmRegistration("k2")
    // Another process (as after kill -9) opens the same file.
    let again = try LocalData(directory: dir)
    #expect(try again.repairInterrupted().map(\.keyID) == ["k1"])
    #expect(try again.repairInterrupted().isEmpty)
    #expect(try again.authenticators().map(\.keyID) == ["k2"])
    #expect(try again.slotAssignments(tokenID: "piv-1")[0x82]?.isFree == true)
  }

  @Test func configurationDefaultsAndErrors() throws {
    let c = Configuration()
    #expect(c.pivAAID == "7B1D#0001" && c.pivSlots.first == "82" && c.pivSlots.count == 20)
    let file = dir.appendingPathComponent("config.json")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: dir) }
    try Data(#"{"server": "https://fido.example", "networkTimeout": 5}"#.utf8).write(to: file)
    let loaded = try Configuration.load(file)
    #expect(loaded.server == "https://fido.example" && loaded.networkTimeout == 5 && loaded.pivAAID == "7B1D#0001")
    try Data("{".utf8).write(to: file)
    #expect(throws: ConfigurationError.notJSON(path: file.path)) { try Configuration.load(file) }
  }

  @Test func backendRefusesInsecureServers() {
    #expect(throws: ConfigurationError.insecureServer("http://fido.example")) {
      try BackendClient(server: "http://fido.example")
    }
    #expect(throws: ConfigurationError.invalidServer("not a url")) { try BackendClient(server: "not a url") }
    #expect((try? BackendClient(server: "http://127.0.0.1:9/"))?.origin == "http://127.0.0.1:9")
    #expect((try? BackendClient(server: "https://fido.example/base"))?.origin == "https://fido.example")
  }
}
