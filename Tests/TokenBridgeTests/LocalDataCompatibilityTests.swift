import Foundation
import Testing

@testable import TokenBridge

/// Databases written by the GRDB-based versions open, read and grow here as before, and what is written here keeps
/// GRDB's encodings, so an older binary still reads it. The fixtures (Tests/Fixtures/LocalData/README.md) were made
/// by that code itself, before GRDB was removed: `grdb-v4.sqlite` through its local-data API, `grdb-dates.txt` by
/// GRDB's own Date encoding.
@Suite struct LocalDataCompatibilityTests {
  static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("Fixtures/LocalData")
  let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tb-compat-\(UUID().uuidString)")
  var database: String { dir.appendingPathComponent("tokenbridge.sqlite").path }

  /// A private copy of the database GRDB wrote.
  func copyGRDBDatabase() throws {
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    #expect(chmod(dir.path, 0o700) == 0)
    try FileManager.default.copyItem(
      atPath: Self.fixtures.appendingPathComponent("grdb-v4.sqlite").path, toPath: database)
    #expect(chmod(database, 0o600) == 0)
  }

  /// What `sql` finds on disk, every column as text (use quote()/typeof() to see the stored types).
  static func raw(_ path: String, _ sql: String) throws -> [[String]] {
    let db = try SQLiteConnection(path: path, busyTimeout: 1000)
    return try db.query(sql) { row throws(SQLiteError) in
      (0..<row.columnCount).map { row.optionalText($0) ?? "NULL" }
    }
  }

  static func date(_ text: String) throws -> Date { try #require(SQLiteDate.date(text)) }

  @Test func grdbDatabaseReadsAsBefore() throws {
    defer { try? FileManager.default.removeItem(at: dir) }
    try copyGRDBDatabase()
    let data = try LocalData(directory: dir)
    #expect(
      try data.authenticators(includeAll: true) == [
        AuthenticatorRecord(
          keyID: "k-alice", aaid: "AAAA#0002", username: "alice", server: "https://rp.example",
          appID: "https://rp.example/facets", tokenID: "piv-1", slot: 0x82, publicKey: Data([0x04, 0xAA, 0x00, 0xFF]),
          signCounter: 2, state: .registered, createdAt: try Self.date("2024-05-01 10:00:00.123"), credentialID: nil,
          hmacSalt: nil),
        AuthenticatorRecord(
          keyID: "k-fido", aaid: "AAAA#0002", username: "carol", server: "https://rp.example",
          appID: "https://rp.example/facets", tokenID: "fido2-9", slot: -1, publicKey: Data([0x04, 0xCC]),
          signCounter: 1, state: .registered, createdAt: try Self.date("2024-05-04 10:00:00.999"),
          credentialID: Data([1, 2, 3]), hmacSalt: Data(repeating: 7, count: 32)),
        AuthenticatorRecord(
          keyID: "k-pending", aaid: "AAAA#0002", username: "bob", server: "https://rp.example",
          appID: "https://rp.example/facets", tokenID: "piv-1", slot: 0x83, publicKey: Data(), signCounter: 0,
          state: .pending, createdAt: try Self.date("2024-12-31 23:59:59.001"), credentialID: nil, hmacSalt: nil),
        AuthenticatorRecord(
          keyID: "", aaid: "", username: "", server: "", appID: "", tokenID: "piv-1", slot: 0x84, publicKey: Data(),
          signCounter: 0, state: .abandoned, createdAt: Date(timeIntervalSince1970: 0), credentialID: nil,
          hmacSalt: nil),
      ])
    // The date is the instant GRDB stored, to the millisecond.
    #expect(
      try data.authenticators().map { $0.createdAt.timeIntervalSince1970 } == [1_714_557_600.123, 1_714_816_800.999])
    #expect(
      try data.accounts() == [
        Account(username: "alice", server: "https://rp.example"),
        Account(username: "carol", server: "https://rp.example"),
      ])
    #expect(
      try data.slotAssignments(tokenID: "piv-1") == [
        0x82: SlotAssignment(tokenID: "piv-1", slot: 0x82, keyID: "k-alice"),
        0x83: SlotAssignment(tokenID: "piv-1", slot: 0x83, keyID: "k-pending"),
        0x84: SlotAssignment(tokenID: "piv-1", slot: 0x84),
      ])
    let device = try #require(try data.deviceInformation())
    #expect(device.name == "TokenBridge on old-host" && device.pushToken == "push-token-1")
    #expect(
      try data.dispatchTargets() == [
        DispatchTargetRecord(id: "dt-1", server: "https://rp.example", username: "alice"),
        DispatchTargetRecord(id: "dt-2", server: "https://rp.example", username: "carol"),
      ])
    // The pending record's owner (pid 999999, start 42) is gone: repaired, its slot ours and free.
    #expect(try data.repairInterrupted().map(\.keyID) == ["k-pending"])
    #expect(try data.slotAssignments(tokenID: "piv-1")[0x83] == SlotAssignment(tokenID: "piv-1", slot: 0x83))
    #expect(try data.nextSignCounter("k-alice") == 3)
    // Nothing was migrated again; only what came after GRDB (v5-intents, v6-interrupted-registrations) was added.
    #expect(
      try Self.raw(database, "SELECT identifier FROM grdb_migrations ORDER BY rowid")
        == [
          ["v1"], ["v2-device"], ["v3-slots-owners"], ["v4-dispatch-targets"], ["v5-intents"],
          ["v6-interrupted-registrations"],
        ])
    // The repaired record is kept for a rerun to ask the server about.
    #expect(try data.interruptedRegistrations(tokenID: "piv-1").map(\.keyID) == ["k-pending"])
  }

  /// A row written here is stored exactly as GRDB stored the same record (types and bytes), so an older binary
  /// reads it.
  @Test func newRowsAreStoredAsGRDBStoredThem() throws {
    defer { try? FileManager.default.removeItem(at: dir) }
    try copyGRDBDatabase()
    let data = try LocalData(directory: dir, owner: ProcessOwner(pid: 999_999, start: 42))
    // The same records the fixture's code wrote (Tests/Fixtures/LocalData/README.md), under other key ids.
    try data.beginRegistration(
      AuthenticatorRecord(
        keyID: "k-fido-new", aaid: "AAAA#0002", username: "carol", server: "https://rp.example",
        appID: "https://rp.example/facets", tokenID: "fido2-9", slot: -1, publicKey: Data(), signCounter: 0,
        state: .pending, createdAt: Date(timeIntervalSince1970: 1_714_816_800.999), credentialID: Data([1, 2, 3]),
        hmacSalt: Data(repeating: 7, count: 32)))
    try data.setPublicKey("k-fido-new", [0x04, 0xCC])
    try data.confirmRegistration("k-fido-new")
    #expect(try data.nextSignCounter("k-fido-new") == 1)
    let pending = AuthenticatorRecord(
      keyID: "k-pending-new", aaid: "AAAA#0002", username: "bob", server: "https://rp.example",
      appID: "https://rp.example/facets", tokenID: "piv-2", slot: -1, publicKey: Data(), signCounter: 0,
      state: .pending, createdAt: Date(timeIntervalSince1970: 1_735_689_599.001), credentialID: nil, hmacSalt: nil)
    #expect(try data.reserveSlot(candidates: [0x83], record: pending) == 0x83)
    try data.saveDispatchTarget(DispatchTargetRecord(id: "dt-3", server: "https://rp.example", username: "bob"))

    let columns = [
      "aaid", "username", "server", "appID", "slot", "publicKey", "signCounter", "state", "createdAt", "credentialID",
      "hmacSalt", "ownerPID", "ownerStart",
    ].map { "typeof(\($0)) || ':' || quote(\($0))" }.joined(separator: ", ")
    func stored(_ keyID: String) throws -> [[String]] {
      try Self.raw(database, "SELECT \(columns) FROM authenticator WHERE keyID = '\(keyID)'")
    }
    #expect(try stored("k-fido-new") == stored("k-fido"))
    #expect(try stored("k-fido-new").first?[8] == "text:'2024-05-04 10:00:00.999'")
    #expect(try stored("k-pending-new") == stored("k-pending"))
    #expect(try stored("k-pending-new").first?[5] == "blob:X''")  // an empty key is an empty blob, not NULL
    let targets = "SELECT typeof(id), typeof(server), typeof(username) FROM dispatchTarget WHERE id IN"
    #expect(try Self.raw(database, "\(targets) ('dt-3')") == Self.raw(database, "\(targets) ('dt-1')"))
    try data.changeDevice(name: nil, pushToken: .disable)
    #expect(try Self.raw(database, "SELECT typeof(name), typeof(pushToken) FROM device") == [["text", "null"]])
  }

  /// A new database has GRDB's schema, statement for statement, and its migrations recorded as GRDB recorded them.
  @Test func newDatabaseHasTheSchemaGRDBMade() throws {
    defer { try? FileManager.default.removeItem(at: dir) }
    _ = try LocalData(directory: dir)
    // The tables of migrations made after GRDB (v5-intents: `intent`, v6: `interruptedRegistration`) are left out.
    let schema = """
      SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_master
      WHERE tbl_name NOT IN ('intent', 'interruptedRegistration') ORDER BY name
      """
    let grdb = Self.fixtures.appendingPathComponent("grdb-v4.sqlite").path
    #expect(try Self.raw(database, schema) == Self.raw(grdb, schema))
    let migrations = """
      SELECT rowid, identifier FROM grdb_migrations
      WHERE identifier NOT IN ('v5-intents', 'v6-interrupted-registrations') ORDER BY rowid
      """
    #expect(try Self.raw(database, migrations) == Self.raw(grdb, migrations))
  }

  /// Every date GRDB encoded in the fixture (a Date's bit pattern, then GRDB's text) encodes to the same text
  /// here, and reads back as a date that encodes to it again.
  @Test func datesAreEncodedAsGRDBEncodedThem() throws {
    let lines = try String(contentsOf: Self.fixtures.appendingPathComponent("grdb-dates.txt"), encoding: .utf8)
      .split(separator: "\n")
    var checked = 0
    for line in lines {
      let parts = line.split(separator: " ", maxSplits: 1)
      let bits = try #require(UInt64(parts[0]))
      let text = String(parts[1])
      guard let year = Int(text.prefix(4)), year > 1582 else { continue }  // ICU's Julian dates: not ours
      let date = Date(timeIntervalSinceReferenceDate: Double(bitPattern: bits))
      #expect(SQLiteDate.text(date) == text, "\(date.timeIntervalSince1970)")
      #expect(SQLiteDate.text(try Self.date(text)) == text)
      checked += 1
    }
    #expect(checked > 4900)
  }

  /// The forms GRDB read besides its own.
  @Test func dateTextFormsGRDBAccepted() throws {
    let base = 1_714_557_600.0  // 2024-05-01 10:00:00 UTC
    let forms: [(String, Double?)] = [
      ("2024-05-01", base - 36000),
      ("2024-05-01 10:00", base),
      ("2024-05-01T10:00:07", base + 7),
      ("2024-05-01 10:00:00.5", base + 0.5),
      ("2024-05-01 10:00:00.25Z", base + 0.25),
      ("2024-05-01 10:00:00.1239999", base + 0.123),
      ("2024-05-01 12:00:00.000+02:00", base),
      ("2024-05-01 09:30-00:30", base),
      ("10:00", nil),
      ("2024-05-01 10", nil),
      ("2024-13-01 10:00", nil),
      ("2024-05-01 10:00:00.", nil),
      ("2024-05-01 10:00:00 UTC", nil),
      ("", nil),
    ]
    for (text, seconds) in forms {
      #expect(SQLiteDate.date(text)?.timeIntervalSince1970 == seconds, "\(text)")
    }
  }

  /// SQLite's failures reach the caller as facts: its message, never the SQL.
  @Test func storageFailuresCarrySQLitesMessage() throws {
    defer { try? FileManager.default.removeItem(at: dir) }
    let data = try LocalData(directory: dir)
    let record = AuthenticatorRecord(
      keyID: "k1", aaid: "AAAA#0002", username: "u", server: "https://rp.example", appID: "https://rp.example",
      tokenID: "fido2-1", slot: -1, publicKey: Data(), signCounter: 0, state: .pending, createdAt: Date(),
      credentialID: nil, hmacSalt: nil)
    try data.beginRegistration(record)
    #expect(
      throws: LocalDataError.unavailable(
        path: data.path, reason: "SQLite: UNIQUE constraint failed: authenticator.keyID")
    ) { try data.beginRegistration(record) }
    // The failed transaction was rolled back: the connection goes on.
    #expect(try data.authenticators(includeAll: true).map(\.keyID) == ["k1"])

    let other = dir.appendingPathComponent("other")
    try FileManager.default.createDirectory(at: other, withIntermediateDirectories: true)
    let file = other.appendingPathComponent("tokenbridge.sqlite").path
    #expect(FileManager.default.createFile(atPath: file, contents: Data(repeating: 0x41, count: 4096)))
    #expect(chmod(file, 0o600) == 0)
    #expect(throws: LocalDataError.unavailable(path: file, reason: "SQLite: file is not a database")) {
      try LocalData(directory: other)
    }
    #expect(throws: SQLiteError(code: 1, message: "no such table: missing")) {
      try SQLiteConnection(path: data.path, busyTimeout: 0).execute("SELECT * FROM missing")
    }
  }
}
