import Foundation
import Testing

@testable import TokenBridge

/// The durable intent of an operation that destroys something on a token: the record, and the pure part of its
/// recovery (which registrations go, from what the token said).
@Suite struct DestructionIntentTests {
  let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tb-intent-\(UUID().uuidString)")

  func record(_ keyID: String, publicKey: [UInt8] = [], credentialID: [UInt8]? = nil) -> AuthenticatorRecord {
    AuthenticatorRecord(
      keyID: keyID, aaid: "4E4E#4005", username: "alice", server: "https://rp.example", appID: "https://rp.example",
      tokenID: "fido2-x", slot: credentialID == nil ? 0x82 : -1, publicKey: Data(publicKey), signCounter: 3,
      state: .registered, createdAt: Date(timeIntervalSince1970: 1_700_000_000),
      credentialID: credentialID.map { Data($0) }, hmacSalt: nil)
  }

  @Test func aLiveRunsIntentIsNotInterrupted() throws {
    let data = try LocalData(directory: dir)
    defer { try? FileManager.default.removeItem(at: dir) }
    let id = try data.beginIntent(.fido2Reset, tokenID: "fido2-x", dependents: [record("k1", credentialID: [1])])
    #expect(try data.interruptedIntents().isEmpty)  // this process still runs it
    #expect(try data.claimIntent(id) == false)
    try data.clearIntent(id)
    #expect(try data.interruptedIntents().isEmpty)
  }

  @Test func anIntentOfARunThatIsGoneIsFoundClaimedOnceAndCleared() throws {
    let gone = try LocalData(directory: dir, owner: try ChildProcess.exited())
    defer { try? FileManager.default.removeItem(at: dir) }
    let deps = [record("k1", credentialID: [1, 2]), record("k2", credentialID: [3])]
    let id = try gone.beginIntent(.fido2Reset, tokenID: "fido2-x", dependents: deps)
    let again = try LocalData(directory: dir)
    let found = try again.interruptedIntents()
    #expect(found.map(\.id) == [id] && found.first?.kind == .fido2Reset && found.first?.tokenID == "fido2-x")
    #expect(found.first?.dependents == deps)  // as they were, credential IDs included
    #expect(try again.claimIntent(id))
    // Claimed by a live run (this one): not interrupted any more, and no one else claims it.
    #expect(try again.interruptedIntents().isEmpty)
    #expect(try LocalData(directory: dir).claimIntent(id) == false)
    try again.clearIntent(id)
    #expect(try again.claimIntent(id) == false)
  }

  @Test func aKindOfANewerVersionIsLeftAlone() throws {
    let gone = try LocalData(directory: dir, owner: try ChildProcess.exited())
    defer { try? FileManager.default.removeItem(at: dir) }
    _ = try gone.beginIntent(.pivKeyOverwrite, tokenID: "piv-1", dependents: [])
    try gone.write { db in try db.execute("UPDATE intent SET kind = 'something-newer'") }
    #expect(try LocalData(directory: dir).interruptedIntents().isEmpty)
  }

  @Test func onlyWhatTheTokenSaysIsGoneGoes() {
    let a = record("a", credentialID: [1])
    let b = record("b", credentialID: [2])
    let split = IntentRecovery.split([a, b], stillOnToken: ["a": false, "b": true])
    #expect(split?.gone == [a] && split?.kept == [b])
    // Half an answer decides nothing.
    #expect(IntentRecovery.split([a, b], stillOnToken: ["a": false]) == nil)
    #expect(IntentRecovery.split([], stillOnToken: [:])?.gone == [])
  }

  @Test func aPIVSlotTellsByItsPublicKey() {
    let r = record("p", publicKey: [4, 1, 2])
    #expect(IntentRecovery.pivKeyStillThere(r, found: ([4, 1, 2], .metadata, false)) == true)
    #expect(IntentRecovery.pivKeyStillThere(r, found: ([4, 9, 9], .metadata, false)) == false)
    #expect(IntentRecovery.pivKeyStillThere(r, found: (nil, nil, true)) == false)  // GET METADATA: empty
    #expect(IntentRecovery.pivKeyStillThere(r, found: (nil, nil, false)) == nil)  // cannot tell
  }

  @Test func theOutcomeSaysWhatWasDone() {
    let o = IntentOutcome(
      operation: .fido2Reset, token: "fido2-x", startedAt: 0, result: .finished,
      removed: [.init(keyID: "k1", username: "alice", server: "https://rp.example", serverFailure: nil)], kept: [],
      reason: nil)
    #expect(o.lines.first?.contains("An interrupted fido2 reset of fido2-x was finished") == true)
    #expect(o.lines.last == "  alice at https://rp.example: deregistered at the server and removed here.")
    var absent = o
    absent.result = .tokenAbsent
    #expect(absent.lines.first?.contains("the token is not here") == true)
  }
}
