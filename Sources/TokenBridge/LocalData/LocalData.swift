import FoundationEssentials
import Platform
import Synchronization
import TokenDevices

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// One UAF credential as the client keeps it. No secret: the private key stays on the token.
public struct AuthenticatorRecord: Codable, Equatable, Sendable {
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
public struct DeviceInformation: Codable, Equatable, Sendable {
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
  /// libsqlite3 cannot be loaded (it is loaded when the local data is first opened, not at start-up).
  case libraryMissing(LibraryUnavailable)
}

/// Local data in SQLite (its C API, `SQLite.swift`) under `$XDG_DATA_HOME/tokenbridge/` (directory 0700, file
/// 0600, both refused when a link, another user's or writable by others). Every state change is one immediate
/// transaction, taken under an exclusive `flock` on `tokenbridge.lock`, so concurrent runs (and connections) wait
/// for each other.
public final class LocalData: Sendable {
  /// One connection, used by one thread at a time.
  let connection: Mutex<SQLiteConnection>
  let lock: WriteLock
  /// The process writing pending records through this connection.
  let owner: ProcessOwner
  public let path: String

  /// A reader meeting a commit (or a writer meeting a reader) waits this long instead of failing.
  static let busyTimeout: Int32 = 30_000

  public convenience init(directory: URL = Configuration.dataDirectory) throws(LocalDataError) {
    try self.init(directory: directory, owner: .current)
  }

  init(directory: URL, owner: ProcessOwner) throws(LocalDataError) {
    do { try SystemLibrary.sqlite3.load() } catch { throw .libraryMissing(error) }
    path = directory.appendingPathComponent("tokenbridge.sqlite").path
    self.owner = owner
    try FileSafety.prepareDirectory(directory)
    lock = try WriteLock(path: directory.appendingPathComponent("tokenbridge.lock").path)
    close(try FileSafety.openFile(path))  // made 0600 before SQLite opens it, checked if it was there
    let db: SQLiteConnection
    do { db = try SQLiteConnection(path: path, busyTimeout: Self.busyTimeout) } catch {
      throw .unavailable(path: path, reason: Self.reason(error))
    }
    connection = Mutex(db)
    try withConnection { db in try lock.withLock { try Self.migrate(db) } }
  }

  /// `body`, every failure as a `LocalDataError` (any other than one as `.unavailable`, at the database's path).
  func run<T>(_ body: () throws -> T) throws(LocalDataError) -> T {
    do { return try body() } catch let e as LocalDataError { throw e } catch {
      throw .unavailable(path: path, reason: Self.reason(error))
    }
  }

  /// `body` with the connection (one thread at a time), every failure as a `LocalDataError`.
  func withConnection<T: Sendable>(_ body: (SQLiteConnection) throws -> T) throws(LocalDataError) -> T {
    let result: Result<T, LocalDataError> = connection.withLock { db in
      do throws(LocalDataError) { return .success(try run { try body(db) }) } catch { return .failure(error) }
    }
    return try result.get()
  }

  /// A sentence for a storage failure: SQLite's own message (never the SQL that failed), or the system's.
  static func reason(_ error: any Error) -> String {
    if let e = error as? SQLiteError { return "SQLite: \(e.message)" }
    return "\(type(of: error))"
  }

  /// One immediate transaction under the write lock.
  func write<T: Sendable>(_ body: (SQLiteConnection) throws -> T) throws(LocalDataError) -> T {
    let lock = self.lock
    return try withConnection { db in try lock.withLock { try db.transaction(.immediate) { try body(db) } } }
  }

  /// One deferred transaction: every query in `body` sees the same state.
  func read<T: Sendable>(_ body: (SQLiteConnection) throws -> T) throws(LocalDataError) -> T {
    try withConnection { db in try db.transaction(.deferred) { try body(db) } }
  }

  /// This machine's device information, if any registration exists.
  public func deviceInformation() throws(LocalDataError) -> DeviceInformation? {
    try read { db in try DeviceInformation.fetch(db) }
  }

  /// Creates the device information with the first confirmed registration; removes it with the last.
  func syncDeviceInformation(_ db: SQLiteConnection) throws {
    let registered =
      try db.integer(
        "SELECT COUNT(*) FROM authenticator WHERE state = ?", AuthenticatorRecord.State.registered.rawValue) ?? 0
    let existing = try DeviceInformation.fetch(db)
    if registered > 0, existing == nil {
      let host = ProcessInfo.processInfo.hostName
      try DeviceInformation(deviceID: UUID().uuidString.lowercased(), name: "TokenBridge on \(host)").insert(db)
    } else if registered == 0, existing != nil, try !hasPending(db) {
      try db.execute("DELETE FROM device")
      try db.execute("DELETE FROM dispatchTarget")
    }
  }

  /// Registered credentials (optionally for one server / user). `includeAll` adds pending records and, when
  /// no server or user is named, the free slots of ours (state `.abandoned`, empty keyID).
  public func authenticators(server: String? = nil, username: String? = nil, includeAll: Bool = false)
    throws(LocalDataError) -> [AuthenticatorRecord]
  {
    try read { db in
      var conditions: [String] = []
      var arguments: [any SQLiteBindable] = []
      if !includeAll {
        conditions.append("state = ?")
        arguments.append(AuthenticatorRecord.State.registered.rawValue)
      }
      if let server {
        conditions.append("server = ?")
        arguments.append(server)
      }
      if let username {
        conditions.append("username = ?")
        arguments.append(username)
      }
      let filter = conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND ")
      var records = try AuthenticatorRecord.fetchAll(db, filter + " ORDER BY createdAt", arguments)
      if includeAll, server == nil, username == nil {
        records += try db.query("SELECT tokenID, slot FROM slotAssignment WHERE keyID IS NULL ORDER BY tokenID, slot") {
          row throws(SQLiteError) in
          AuthenticatorRecord(
            keyID: "", aaid: "", username: "", server: "", appID: "", tokenID: try row.text(0),
            slot: try row.int(1), publicKey: Data(), signCounter: 0, state: .abandoned,
            createdAt: Date(timeIntervalSince1970: 0), credentialID: nil, hmacSalt: nil)
        }
      }
      return records
    }
  }

  /// One query, grouped by SQLite, not every record decoded and grouped here: the listing stays fast with
  /// 10,000 registrations (docs/performance.md).
  public func accounts() throws(LocalDataError) -> [Account] {
    try read { db in
      try db.query(
        """
        SELECT username, server FROM authenticator WHERE state = ?
        GROUP BY username, server ORDER BY MIN(createdAt), MIN(rowid)
        """, AuthenticatorRecord.State.registered.rawValue
      ) { row throws(SQLiteError) in Account(username: try row.text(0), server: try row.text(1)) }
    }
  }

  /// The PIV slots of `tokenID` this client owns, by slot number.
  public func slotAssignments(tokenID: String) throws(LocalDataError) -> [Int: SlotAssignment] {
    try read { db in
      let rows = try db.query("SELECT slot, keyID FROM slotAssignment WHERE tokenID = ?", tokenID) {
        row throws(SQLiteError) in
        SlotAssignment(tokenID: tokenID, slot: try row.int(0), keyID: row.optionalText(1))
      }
      return Dictionary(rows.map { ($0.slot, $0) }, uniquingKeysWith: { a, _ in a })
    }
  }
}

extension AuthenticatorRecord {
  /// The columns in the order `init(row:)` reads them.
  static let columns =
    "keyID, aaid, username, server, appID, tokenID, slot, publicKey, signCounter, state, createdAt, credentialID, "
    + "hmacSalt"

  init(row: SQLiteRow) throws(SQLiteError) {
    let state = try row.text(9)
    guard let s = State(rawValue: state) else { throw .mismatch("column state holds an unknown state") }
    self.init(
      keyID: try row.text(0), aaid: try row.text(1), username: try row.text(2), server: try row.text(3),
      appID: try row.text(4), tokenID: try row.text(5), slot: try row.int(6), publicKey: try row.data(7),
      signCounter: try row.int(8), state: s, createdAt: try row.date(10), credentialID: row.optionalData(11),
      hmacSalt: row.optionalData(12))
  }

  /// The records `tail` selects (" WHERE … ORDER BY …").
  static func fetchAll(_ db: SQLiteConnection, _ tail: String, _ arguments: [any SQLiteBindable]) throws(SQLiteError)
    -> [AuthenticatorRecord]
  {
    let statement = try db.prepare("SELECT \(columns) FROM authenticator" + tail)
    try statement.bind(arguments)
    var records: [AuthenticatorRecord] = []
    while try statement.step() { records.append(try AuthenticatorRecord(row: SQLiteRow(statement: statement.handle))) }
    return records
  }

  /// Inserts every column, as GRDB's `insert` did.
  func insert(_ db: SQLiteConnection) throws(SQLiteError) {
    try db.execute(
      "INSERT INTO authenticator (\(Self.columns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", keyID, aaid,
      username, server, appID, tokenID, slot, publicKey, signCounter, state.rawValue, createdAt, credentialID,
      hmacSalt)
  }
}

extension DeviceInformation {
  /// The one row of `device` (the first, should there be more).
  static func fetch(_ db: SQLiteConnection) throws(SQLiteError) -> DeviceInformation? {
    try db.query("SELECT deviceID, name, pushToken FROM device LIMIT 1") { row throws(SQLiteError) in
      DeviceInformation(deviceID: try row.text(0), name: try row.text(1), pushToken: row.optionalText(2))
    }.first
  }

  func insert(_ db: SQLiteConnection) throws(SQLiteError) {
    try db.execute("INSERT INTO device (deviceID, name, pushToken) VALUES (?, ?, ?)", deviceID, name, pushToken)
  }
}
