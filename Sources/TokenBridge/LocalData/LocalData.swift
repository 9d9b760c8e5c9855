import Foundation
import GRDB

/// One UAF credential as the client keeps it. No secret: the private key stays on the token.
public struct AuthenticatorRecord: Codable, Equatable, Sendable, FetchableRecord, PersistableRecord {
  public static let databaseTableName = "authenticator"

  public enum State: String, Codable, Sendable {
    /// Key made (or being made) on the token, registration not yet accepted by the server. Owned by the run
    /// that writes it; repaired only once that process is gone.
    case pending
    /// Accepted by the server.
    case registered
    /// A PIV slot of ours that no registration uses (failed or interrupted registration, deregistration): free
    /// for the next registration, never someone else's. Only in `authenticators(includeAll: true)`, with an
    /// empty keyID: it is a slot assignment, not a record.
    case abandoned
  }

  /// base64url KeyID (32 random bytes).
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

/// A PIV slot this client owns on a token: `keyID` is the registration (pending or registered) using it, nil
/// when the slot is free for the next registration (its key, if any, is dead).
public struct SlotAssignment: Equatable, Sendable {
  public var tokenID: String
  public var slot: Int
  public var keyID: String?
  public var isFree: Bool { keyID == nil }
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
  /// The push token (FCM registration token) the dispatch targets carry; nil: push disabled.
  public var pushToken: String?
}

public enum LocalDataError: Error, Equatable, Sendable {
  /// Why a path of the local data is refused.
  public enum InsecureReason: Equatable, Sendable {
    case symbolicLink
    case notADirectory
    case notARegularFile
    /// Group or world writable; `mode` is the permission bits found.
    case writableByOthers(mode: UInt32)
    case ownedByAnotherUser(uid: UInt32)
  }

  case unavailable(path: String, reason: String)
  case notFound(String)
  /// The data directory, database or lock file could be changed by someone else: not used.
  case insecure(path: String, reason: InsecureReason)
}

/// Local data in SQLite (GRDB) under `$XDG_DATA_HOME/tokenbridge/` (directory 0700, file 0600, both refused
/// when a link, another user's or writable by others). Every state change is one transaction, taken under
/// an exclusive `flock` on `tokenbridge.lock`, so concurrent runs (and connections) wait for each other.
public final class LocalData: Sendable {
  let db: DatabaseQueue
  let lock: WriteLock
  /// The process writing pending records through this connection.
  let owner: ProcessOwner
  public let path: String

  public convenience init(directory: URL = Configuration.dataDirectory) throws(LocalDataError) {
    try self.init(directory: directory, owner: .current)
  }

  init(directory: URL, owner: ProcessOwner) throws(LocalDataError) {
    path = directory.appendingPathComponent("tokenbridge.sqlite").path
    self.owner = owner
    try FileSafety.prepareDirectory(directory)
    lock = try WriteLock(path: directory.appendingPathComponent("tokenbridge.lock").path)
    close(try FileSafety.openFile(path))  // made 0600 before SQLite opens it, checked if it was there
    var config = GRDB.Configuration()
    config.busyMode = .timeout(30)  // a reader meeting a commit waits instead of failing
    do {
      db = try DatabaseQueue(path: path, configuration: config)
    } catch { throw .unavailable(path: path, reason: Self.reason(error)) }
    let (db, lock) = (db, lock)
    try run { try lock.withLock { try Self.migrator.migrate(db) } }
  }

  func run<T>(_ body: () throws -> T) throws(LocalDataError) -> T {
    do { return try body() } catch let e as LocalDataError { throw e } catch {
      throw .unavailable(path: path, reason: Self.reason(error))
    }
  }

  /// A sentence for a storage failure: SQLite's own message (never the SQL that failed), or the system's.
  static func reason(_ error: Error) -> String {
    if let e = error as? DatabaseError {
      return "SQLite: \(e.message ?? "error \(e.resultCode.primaryResultCode.rawValue)")"
    }
    if let e = error as? CocoaError { return e.localizedDescription }
    return "\(type(of: error))"
  }

  /// One immediate transaction under the write lock.
  func write<T>(_ body: (Database) throws -> T) throws(LocalDataError) -> T {
    let lock = self.lock
    return try run {
      try db.writeWithoutTransaction { db in
        try lock.withLock {
          var result: T?
          try db.inTransaction(.immediate) {
            result = try body(db)
            return .commit
          }
          guard let result else { throw LocalDataError.unavailable(path: path, reason: "transaction rolled back") }
          return result
        }
      }
    }
  }

  func read<T>(_ body: (Database) throws -> T) throws(LocalDataError) -> T {
    try run { try db.read(body) }
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
    } else if registered == 0, existing != nil, try !hasPending(db) {
      try DeviceInformation.deleteAll(db)
      try db.execute(sql: "DELETE FROM dispatchTarget")
    }
  }

  /// Registered credentials (optionally for one server / user). `includeAll` adds pending records and, when
  /// no server or user is named, the free slots of ours (state `.abandoned`, empty keyID).
  public func authenticators(server: String? = nil, username: String? = nil, includeAll: Bool = false)
    throws(LocalDataError) -> [AuthenticatorRecord]
  {
    try read { db in
      var q = AuthenticatorRecord.all()
      if !includeAll { q = q.filter(Column("state") == AuthenticatorRecord.State.registered.rawValue) }
      if let server { q = q.filter(Column("server") == server) }
      if let username { q = q.filter(Column("username") == username) }
      var records = try q.order(Column("createdAt")).fetchAll(db)
      if includeAll, server == nil, username == nil {
        let free = try Row.fetchAll(
          db, sql: "SELECT tokenID, slot FROM slotAssignment WHERE keyID IS NULL ORDER BY tokenID, slot")
        records += free.map {
          AuthenticatorRecord(
            keyID: "", aaid: "", username: "", server: "", appID: "", tokenID: $0["tokenID"], slot: $0["slot"],
            publicKey: Data(), signCounter: 0, state: .abandoned, createdAt: Date(timeIntervalSince1970: 0),
            credentialID: nil, hmacSalt: nil)
        }
      }
      return records
    }
  }

  /// One query, grouped by SQLite: with 10,000 registrations, decoding every record and looking each account
  /// up in the list made so far took seconds (issue 12, scale).
  public func accounts() throws(LocalDataError) -> [Account] {
    try read { db in
      try Row.fetchAll(
        db,
        sql: """
          SELECT username, server FROM authenticator WHERE state = ?
          GROUP BY username, server ORDER BY MIN(createdAt), MIN(rowid)
          """, arguments: [AuthenticatorRecord.State.registered.rawValue]
      ).map { Account(username: $0[0], server: $0[1]) }  // by position: a name lookup per row costs more
    }
  }

  /// The PIV slots of `tokenID` this client owns, by slot number.
  public func slotAssignments(tokenID: String) throws(LocalDataError) -> [Int: SlotAssignment] {
    try read { db in
      let rows = try Row.fetchAll(
        db, sql: "SELECT slot, keyID FROM slotAssignment WHERE tokenID = ?", arguments: [tokenID])
      return Dictionary(
        rows.map { ($0["slot"], SlotAssignment(tokenID: tokenID, slot: $0["slot"], keyID: $0["keyID"])) },
        uniquingKeysWith: { a, _ in a })
    }
  }
}
