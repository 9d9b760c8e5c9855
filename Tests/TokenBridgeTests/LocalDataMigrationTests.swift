import Foundation
import Testing

@testable import TokenBridge

/// A database made by the schema before slot assignments (v1 + v2-device, as released) opens with nothing lost.
@Suite struct LocalDataMigrationTests {
  let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tb-migrate-\(UUID().uuidString)")

  /// The old schema and data as the old code wrote them (placeholder `slot:<token>:<slot>` records for
  /// abandoned slots, a pending record without owner).
  func makeOldDatabase() throws {
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    let db = try SQLiteConnection(path: dir.appendingPathComponent("tokenbridge.sqlite").path, busyTimeout: 0)
    try db.transaction(.immediate) {
      try db.executeScript(
        """
        CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);
        INSERT INTO grdb_migrations VALUES ('v1'), ('v2-device');
        CREATE TABLE "authenticator" ("keyID" TEXT PRIMARY KEY NOT NULL, "aaid" TEXT NOT NULL,
          "username" TEXT NOT NULL, "server" TEXT NOT NULL, "appID" TEXT NOT NULL, "tokenID" TEXT NOT NULL,
          "slot" INTEGER NOT NULL, "publicKey" BLOB NOT NULL, "signCounter" INTEGER NOT NULL,
          "state" TEXT NOT NULL, "createdAt" DATETIME NOT NULL, "credentialID" BLOB, "hmacSalt" BLOB);
        CREATE UNIQUE INDEX authenticator_slot ON authenticator(tokenID, slot) WHERE slot >= 0;
        CREATE TABLE "device" ("deviceID" TEXT PRIMARY KEY NOT NULL, "name" TEXT NOT NULL);
        INSERT INTO device VALUES ('d-1', 'TokenBridge on old-host');
        INSERT INTO authenticator VALUES
          ('k-alice', '7B1D#0001', 'alice', 'https://rp.example', 'https://rp.example/facets', 'piv-1', 130,
            x'04AA', 7, 'registered', '2024-05-01 10:00:00.000', NULL, NULL),
          ('slot:piv-1:83', '7B1D#0001', '', 'https://rp.example', 'https://rp.example/facets', 'piv-1', 131,
            x'04BB', 0, 'abandoned', '2024-05-02 10:00:00.000', NULL, NULL),
          ('k-pending', '7B1D#0001', 'bob', 'https://rp.example', 'https://rp.example/facets', 'piv-1', 132,
            x'', 0, 'pending', '2024-05-03 10:00:00.000', NULL, NULL),
          ('k-fido', 'AAAA#0002', 'carol', 'https://rp.example', 'https://rp.example/facets', 'fido2-9', -1,
            x'04CC', 3, 'registered', '2024-05-04 10:00:00.000', x'0102', x'0304');
        """)
    }
  }

  @Test func oldDatabaseKeepsEveryRegistration() throws {
    defer { try? FileManager.default.removeItem(at: dir) }
    try makeOldDatabase()
    let data = try LocalData(directory: dir)
    let registered = try data.authenticators()
    #expect(registered.map(\.keyID) == ["k-alice", "k-fido"])
    #expect(registered.map(\.signCounter) == [7, 3])
    #expect(registered.map(\.publicKey) == [Data([0x04, 0xAA]), Data([0x04, 0xCC])])
    #expect(registered[1].credentialID == Data([1, 2]) && registered[1].hmacSalt == Data([3, 4]))
    #expect(try data.deviceInformation() == DeviceInformation(deviceID: "d-1", name: "TokenBridge on old-host"))
    #expect(
      try data.slotAssignments(tokenID: "piv-1") == [
        0x82: SlotAssignment(tokenID: "piv-1", slot: 0x82, keyID: "k-alice"),
        0x83: SlotAssignment(tokenID: "piv-1", slot: 0x83),
        0x84: SlotAssignment(tokenID: "piv-1", slot: 0x84, keyID: "k-pending"),
      ])
    // No placeholder key ids are left; the old pending record has no owner, so it was interrupted.
    #expect(try data.authenticators(includeAll: true).map(\.keyID) == ["k-alice", "k-pending", "k-fido", ""])
    #expect(try data.repairInterrupted().map(\.keyID) == ["k-pending"])
    #expect(try data.slotAssignments(tokenID: "piv-1")[0x84]?.isFree == true)
    #expect(try data.nextSignCounter("k-alice") == 8)
    // Migrated once: a second open changes nothing.
    #expect(try LocalData(directory: dir).authenticators().map(\.keyID) == ["k-alice", "k-fido"])
  }
}
