import Foundation
import GRDB

/// One UAF credential as the client keeps it. No secret: the private key stays on the token.
public struct AuthenticatorRecord: Codable, Equatable, Sendable, FetchableRecord, PersistableRecord {
  public static let databaseTableName = "authenticator"

  public enum State: String, Codable, Sendable {
    /// Key made on the token, registration not yet accepted by the server.
    case pending
    /// Accepted by the server.
    case registered
    /// The slot holds a key of ours that no registration uses (failed or interrupted registration,
    /// deregistration): free for the next registration, never someone else's.
    case abandoned
  }

  /// base64url KeyID (32 random bytes); for abandoned slots a placeholder `slot:<token>:<slot>`.
  public var keyID: String
  public var aaid: String
  public var username: String
  public var server: String
  public var appID: String
  public var tokenID: String
  /// PIV key reference (e.g. 0x82); -1 for a FIDO2 key.
  public var slot: Int
  public var publicKey: Data
  public var signCounter: Int
  public var state: State
  public var createdAt: Date
  /// FIDO2: the key's credential ID and the hmac-secret salt the UAF key is derived from (not secret).
  public var credentialID: Data?
  public var hmacSalt: Data?
}

/// An account: a username at a server, with its registered authenticators.
public struct Account: Codable, Equatable, Sendable {
  public var username: String
  public var server: String
}

/// The SDKs' DeviceInformation: one per machine, made with the first registration, gone with the last.
public struct DeviceInformation: Codable, Equatable, Sendable, FetchableRecord, PersistableRecord {
  public static let databaseTableName = "device"
  public var deviceID: String
  public var name: String
}

public enum LocalDataError: Error, Equatable, Sendable {
  case unavailable(path: String, reason: String)
  case notFound(String)
}

/// Local data in SQLite (GRDB) under `$XDG_DATA_HOME/tokenbridge/` (directory 0700, file 0600); every
/// state change is one transaction.
public final class LocalData: @unchecked Sendable {
  let db: DatabaseQueue
  public let path: String

  public init(directory: URL = Configuration.dataDirectory) throws(LocalDataError) {
    path = directory.appendingPathComponent("tokenbridge.sqlite").path
    do {
      try FileManager.default.createDirectory(
        at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
      let old = umask(0o077)
      defer { umask(old) }
      db = try DatabaseQueue(path: path)
      try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
      try Self.migrator.migrate(db)
    } catch {
      throw .unavailable(path: path, reason: "\(error)")
    }
  }

  static var migrator: DatabaseMigrator {
    var m = DatabaseMigrator()
    m.registerMigration("v1") { db in
      try db.create(table: "authenticator") { t in
        t.primaryKey("keyID", .text)
        t.column("aaid", .text).notNull()
        t.column("username", .text).notNull()
        t.column("server", .text).notNull()
        t.column("appID", .text).notNull()
        t.column("tokenID", .text).notNull()
        t.column("slot", .integer).notNull()
        t.column("publicKey", .blob).notNull()
        t.column("signCounter", .integer).notNull()
        t.column("state", .text).notNull()
        t.column("createdAt", .datetime).notNull()
        t.column("credentialID", .blob)
        t.column("hmacSalt", .blob)
      }
      // One record per PIV slot; FIDO2 records (slot -1) may be many per key.
      try db.execute(sql: "CREATE UNIQUE INDEX authenticator_slot ON authenticator(tokenID, slot) WHERE slot >= 0")
    }
    m.registerMigration("v2-device") { db in
      try db.create(table: "device") { t in
        t.primaryKey("deviceID", .text)
        t.column("name", .text).notNull()
      }
    }
    return m
  }

  /// This machine's device information, if any registration exists.
  public func deviceInformation() throws(LocalDataError) -> DeviceInformation? {
    try read { db in try DeviceInformation.fetchOne(db) }
  }

  /// Creates the device information with the first confirmed registration; removes it with the last.
  func syncDeviceInformation(_ db: Database) throws {
    let registered = try AuthenticatorRecord.filter(Column("state") == AuthenticatorRecord.State.registered.rawValue)
      .fetchCount(db)
    let existing = try DeviceInformation.fetchOne(db)
    if registered > 0, existing == nil {
      let host = ProcessInfo.processInfo.hostName
      try DeviceInformation(deviceID: UUID().uuidString.lowercased(), name: "TokenBridge on \(host)").insert(db)
    } else if registered == 0, existing != nil {
      try DeviceInformation.deleteAll(db)
    }
  }

  func write<T>(_ body: (Database) throws -> T) throws(LocalDataError) -> T {
    do { return try db.write(body) } catch { throw .unavailable(path: path, reason: "\(error)") }
  }

  func read<T>(_ body: (Database) throws -> T) throws(LocalDataError) -> T {
    do { return try db.read(body) } catch { throw .unavailable(path: path, reason: "\(error)") }
  }

  /// Registered credentials (optionally for one server / user).
  public func authenticators(server: String? = nil, username: String? = nil, includeAll: Bool = false)
    throws(LocalDataError) -> [AuthenticatorRecord]
  {
    try read { db in
      var q = AuthenticatorRecord.all()
      if !includeAll { q = q.filter(Column("state") == AuthenticatorRecord.State.registered.rawValue) }
      if let server { q = q.filter(Column("server") == server) }
      if let username { q = q.filter(Column("username") == username) }
      return try q.order(Column("createdAt")).fetchAll(db)
    }
  }

  public func accounts() throws(LocalDataError) -> [Account] {
    try authenticators().reduce(into: [Account]()) { acc, r in
      let a = Account(username: r.username, server: r.server)
      if !acc.contains(a) { acc.append(a) }
    }
  }

  /// Slots of `tokenID` this client owns (any state), by slot number.
  public func ownedSlots(tokenID: String) throws(LocalDataError) -> [Int: AuthenticatorRecord] {
    try read { db in
      let rows = try AuthenticatorRecord.filter(Column("tokenID") == tokenID && Column("slot") >= 0).fetchAll(db)
      return Dictionary(uniqueKeysWithValues: rows.map { ($0.slot, $0) })
    }
  }

  /// Writes the pending record for a slot (replacing an abandoned one), before the key is made.
  public func beginRegistration(_ record: AuthenticatorRecord) throws(LocalDataError) {
    try write { db in
      if record.slot >= 0 {
        try AuthenticatorRecord.filter(Column("tokenID") == record.tokenID && Column("slot") == record.slot)
          .deleteAll(db)
      }
      var r = record
      r.state = .pending
      try r.insert(db)
    }
  }

  /// Stores the public key once the token made it (still pending).
  public func setPublicKey(_ keyID: String, _ key: [UInt8]) throws(LocalDataError) {
    try write { db in
      try db.execute(sql: "UPDATE authenticator SET publicKey = ? WHERE keyID = ?", arguments: [Data(key), keyID])
    }
  }

  public func confirmRegistration(_ keyID: String) throws(LocalDataError) {
    try setState(keyID, .registered)
  }

  /// The slot stays ours (its key is dead): a later registration reuses it. A FIDO2 record is removed: its
  /// key is derived, not stored, so nothing is left behind.
  public func abandon(_ keyID: String) throws(LocalDataError) {
    try write { db in
      guard var r = try AuthenticatorRecord.fetchOne(db, key: keyID) else { return }
      try r.delete(db)
      defer { try? syncDeviceInformation(db) }
      guard r.slot >= 0 else { return }
      r.keyID = "slot:\(r.tokenID):\(String(r.slot, radix: 16))"
      r.state = .abandoned
      r.username = ""
      try r.insert(db, onConflict: .replace)
    }
  }

  func setState(_ keyID: String, _ state: AuthenticatorRecord.State) throws(LocalDataError) {
    try write { db in
      try db.execute(sql: "UPDATE authenticator SET state = ? WHERE keyID = ?", arguments: [state.rawValue, keyID])
      if db.changesCount == 0 { throw LocalDataError.notFound(keyID) }
      try syncDeviceInformation(db)
    }
  }

  /// Pending registrations left by an interrupted run: marked abandoned (their slots stay ours).
  @discardableResult
  public func repairInterrupted() throws(LocalDataError) -> [AuthenticatorRecord] {
    let pending = try read { db in
      try AuthenticatorRecord.filter(Column("state") == AuthenticatorRecord.State.pending.rawValue).fetchAll(db)
    }
    for p in pending { try abandon(p.keyID) }
    return pending
  }

  /// The next sign counter for a key, committed before the signature is made (a crash never reuses one).
  public func nextSignCounter(_ keyID: String) throws(LocalDataError) -> UInt32 {
    try write { db in
      try db.execute(sql: "UPDATE authenticator SET signCounter = signCounter + 1 WHERE keyID = ?", arguments: [keyID])
      guard
        let n = try Int.fetchOne(db, sql: "SELECT signCounter FROM authenticator WHERE keyID = ?", arguments: [keyID])
      else { throw LocalDataError.notFound(keyID) }
      return UInt32(truncatingIfNeeded: n)
    }
  }

  /// Forgets a credential locally only (the server keeps it; `deregister` tells both). The slot stays
  /// recorded as ours, so its key is overwritten by the next registration rather than left unknown.
  public func delete(_ keyID: String) throws(LocalDataError) {
    let exists = try read { db in try AuthenticatorRecord.fetchOne(db, key: keyID) != nil }
    guard exists else { throw .notFound(keyID) }
    try abandon(keyID)
  }
}
