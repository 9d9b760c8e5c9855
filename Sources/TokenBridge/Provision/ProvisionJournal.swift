import FoundationEssentials
import Platform
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// Where a provisioning row stands. The stages run in this order; a rerun starts each row at its stage.
public enum ProvisionStage: String, Sendable, Codable, Comparable {
  /// No token yet.
  case pending
  /// A token is the row's (by serial, or by order).
  case assigned
  /// A fresh PIN was made and sealed (the ciphertext is in the journal, the PIN held until the row is done); the
  /// token may or may not have it yet.
  case pinChosen
  /// The token has its PIN (the fresh one, or the one it had: `--pin-fd`).
  case pinSet
  /// A registration was started: the server may have taken it (a rerun asks before registering again).
  case registering
  /// The server took the registration (its AAID and KeyID recorded); a fresh FIDO2 PIN is yet to be marked for
  /// change (forcePINChange).
  case registered
  case done

  static let order: [ProvisionStage] = [.pending, .assigned, .pinChosen, .pinSet, .registering, .registered, .done]
  public static func < (a: Self, b: Self) -> Bool { order.firstIndex(of: a)! < order.firstIndex(of: b)! }
}

/// One row as the journal keeps it.
public struct ProvisionJournalRow: Equatable, Sendable {
  public var row: ProvisionRow
  public var tokenID: String?
  /// The side of the token the row uses (a composite token's PIV card or FIDO2 key): its id.
  public var sideID: String?
  /// What the report shows as the token's serial: the USB/PIV serial, else the token id.
  public var shownSerial: String?
  public var stage: ProvisionStage
  public var failed: Bool
  public var errorCode: Int?
  public var errorMessage: String?
  public var seconds: Double
  public var sealedPin: String?
  public var note: String?
  public var aaid: String?
  public var keyID: String?
}

/// The provisioning journal: SQLite through the local data's connection (`SQLite.swift`), in a file the operator
/// names (created 0600; a link, another user's file or one others may write is refused, as the local data). Every
/// change is one immediate transaction, committed before the step it records is taken further, so a run killed at any
/// point leaves a journal a rerun can finish. Deleted content is overwritten (`secure_delete`): a PIN held here (only
/// when the kernel keyring cannot hold it) leaves no trace in free pages once dropped.
public final class ProvisionJournal: Sendable {
  let connection: Mutex<SQLiteConnection>
  public let path: String

  static let schema = """
    CREATE TABLE IF NOT EXISTS run (
      id INTEGER PRIMARY KEY CHECK (id = 1),
      planDigest TEXT NOT NULL,
      server TEXT NOT NULL,
      nonce TEXT NOT NULL,
      createdAt DATETIME NOT NULL);
    CREATE TABLE IF NOT EXISTS plan (
      number INTEGER PRIMARY KEY,
      username TEXT NOT NULL,
      serial TEXT,
      kind TEXT,
      payload TEXT,
      tokenID TEXT,
      sideID TEXT,
      shownSerial TEXT,
      stage TEXT NOT NULL DEFAULT 'pending',
      failed INTEGER NOT NULL DEFAULT 0,
      errorCode INTEGER,
      errorMessage TEXT,
      seconds REAL NOT NULL DEFAULT 0,
      sealedPin TEXT,
      note TEXT,
      aaid TEXT,
      keyID TEXT);
    CREATE TABLE IF NOT EXISTS heldPin (
      number INTEGER PRIMARY KEY REFERENCES plan(number) ON DELETE CASCADE,
      pin BLOB NOT NULL);
    """

  public init(path: String) throws(ProvisionError) {
    self.path = path
    do { try SystemLibrary.sqlite3.load() } catch { throw .journal(.libraryMissing(error)) }
    // The plan's digest and each row's registration hash and sign with libcrypto (Sources/SystemCrypto).
    do { try SystemLibrary.crypto.load() } catch { throw .journal(.libraryMissing(error)) }
    do { close(try FileSafety.openFile(path)) } catch { throw .journal(error) }
    let db: SQLiteConnection
    do {
      db = try SQLiteConnection(path: path, busyTimeout: 30_000)
      try db.execute("PRAGMA secure_delete = ON")
      try db.transaction(.immediate) { try db.executeScript(Self.schema) }
    } catch {
      throw .journal(.unavailable(path: path, reason: LocalData.reason(error)))
    }
    connection = Mutex(db)
  }

  func write<T: Sendable>(_ body: (SQLiteConnection) throws -> T) throws(ProvisionError) -> T {
    let path = self.path
    let result: Result<T, ProvisionError> = connection.withLock { db in
      do { return .success(try db.transaction(.immediate) { try body(db) }) } catch let e as ProvisionError {
        return .failure(e)
      } catch { return .failure(.journal(.unavailable(path: path, reason: LocalData.reason(error)))) }
    }
    return try result.get()
  }

  /// Binds the journal to `plan` at `server` (a new journal takes the plan's rows); a journal made for another plan
  /// or server is refused, so a rerun never mixes two desks' work. Returns the journal's nonce (keyring names).
  public func begin(_ plan: ProvisionPlan, server: String) throws(ProvisionError) -> String {
    let digest = plan.digest
    let rows = plan.rows
    return try write { db in
      let existing = try db.query("SELECT planDigest, server, nonce FROM run") { row throws(SQLiteError) in
        (try row.text(0), try row.text(1), try row.text(2))
      }
      if let (d, s, nonce) = existing.first {
        guard d == digest else { throw ProvisionError.otherPlan }
        guard s == server else { throw ProvisionError.otherServer(journal: s, now: server) }
        return nonce
      }
      var random = SystemRandomNumberGenerator()
      let nonce = Hex.lowercase((0..<8).map { _ in UInt8.random(in: 0...255, using: &random) })
      try db.execute(
        "INSERT INTO run (id, planDigest, server, nonce, createdAt) VALUES (1, ?, ?, ?, ?)", digest, server, nonce,
        Date())
      for r in rows {
        try db.execute(
          "INSERT INTO plan (number, username, serial, kind, payload) VALUES (?, ?, ?, ?, ?)", r.number, r.username,
          r.serial, r.kind?.rawValue, r.payload)
      }
      return nonce
    }
  }

  public func rows() throws(ProvisionError) -> [ProvisionJournalRow] {
    try write { db in
      try db.query(
        """
        SELECT number, username, serial, kind, payload, tokenID, sideID, shownSerial, stage, failed, errorCode,
        errorMessage, seconds, sealedPin, note, aaid, keyID FROM plan ORDER BY number
        """
      ) { r throws(SQLiteError) in
        ProvisionJournalRow(
          row: ProvisionRow(
            number: try r.int(0), username: try r.text(1), serial: r.optionalText(2),
            kind: r.optionalText(3).flatMap { .init(rawValue: $0) }, payload: r.optionalText(4)),
          tokenID: r.optionalText(5), sideID: r.optionalText(6), shownSerial: r.optionalText(7),
          stage: ProvisionStage(rawValue: try r.text(8)) ?? .pending, failed: try r.int(9) != 0,
          errorCode: r.optionalInteger(10).map { Int($0) }, errorMessage: r.optionalText(11),
          seconds: r.optionalReal(12) ?? 0, sealedPin: r.optionalText(13), note: r.optionalText(14),
          aaid: r.optionalText(15), keyID: r.optionalText(16))
      }
    }
  }

  public func assign(_ number: Int, tokenID: String, sideID: String, shownSerial: String) throws(ProvisionError) {
    try write { db in
      try db.execute(
        "UPDATE plan SET tokenID = ?, sideID = ?, shownSerial = ?, stage = ? WHERE number = ? AND stage = ?",
        tokenID, sideID, shownSerial, ProvisionStage.assigned.rawValue, number, ProvisionStage.pending.rawValue)
    }
  }

  /// The fresh PIN's sealed form, recorded before the token gets the PIN.
  public func chosePIN(_ number: Int, sealed: String) throws(ProvisionError) {
    try write { db in
      try db.execute(
        "UPDATE plan SET sealedPin = ?, stage = ? WHERE number = ?", sealed, ProvisionStage.pinChosen.rawValue, number)
    }
  }

  public func advance(_ number: Int, to stage: ProvisionStage, note: String? = nil) throws(ProvisionError) {
    try write { db in
      try db.execute(
        "UPDATE plan SET stage = ?, note = COALESCE(?, note) WHERE number = ?", stage.rawValue, note, number)
    }
  }

  /// A note's sentence added after the row's note so far (three bindings of the sentence; NULL adds nothing).
  static let noteAdded = "CASE WHEN ? IS NULL THEN note WHEN note IS NULL THEN ? ELSE note || ' ' || ? END"

  /// The server took the row's registration: AAID and KeyID recorded, `note` added (stage `registered`).
  public func registered(_ number: Int, aaid: String, keyID: String, note: String?) throws(ProvisionError) {
    try write { db in
      try db.execute(
        "UPDATE plan SET stage = ?, aaid = ?, keyID = ?, note = \(Self.noteAdded) WHERE number = ?",
        ProvisionStage.registered.rawValue, aaid, keyID, note, note, note, number)
    }
  }

  /// The row is done: its registration (AAID, KeyID) recorded, `note` added to the row's, and any PIN held here
  /// erased, in one transaction.
  public func finish(_ number: Int, aaid: String, keyID: String, note: String?) throws(ProvisionError) {
    try write { db in
      try db.execute(
        """
        UPDATE plan SET stage = ?, failed = 0, errorCode = NULL, errorMessage = NULL, aaid = ?, keyID = ?,
        note = \(Self.noteAdded) WHERE number = ?
        """, ProvisionStage.done.rawValue, aaid, keyID, note, note, note, number)
      try db.execute("DELETE FROM heldPin WHERE number = ?", number)
    }
  }

  public func fail(_ number: Int, code: Int, message: String) throws(ProvisionError) {
    try write { db in
      try db.execute(
        "UPDATE plan SET failed = 1, errorCode = ?, errorMessage = ? WHERE number = ?", code, message, number)
    }
  }

  /// A new attempt at a row that failed before: its old error goes.
  public func retry(_ number: Int) throws(ProvisionError) {
    try write { db in
      try db.execute("UPDATE plan SET failed = 0, errorCode = NULL, errorMessage = NULL WHERE number = ?", number)
    }
  }

  public func addSeconds(_ number: Int, _ seconds: Double) throws(ProvisionError) {
    try write { db in try db.execute("UPDATE plan SET seconds = seconds + ? WHERE number = ?", seconds, number) }
  }

  /// A PIN kept in the journal itself (0600), only where the kernel keyring refused it; erased by `finish` or
  /// `dropHeldPIN`.
  func holdPIN(_ number: Int, _ pin: [UInt8]) throws(ProvisionError) {
    try write { db in
      try db.execute("INSERT OR REPLACE INTO heldPin (number, pin) VALUES (?, ?)", number, pin)
    }
  }

  func heldPIN(_ number: Int) throws(ProvisionError) -> [UInt8]? {
    try write { db in
      try db.query("SELECT pin FROM heldPin WHERE number = ?", number) { r throws(SQLiteError) in
        [UInt8](try r.data(0))
      }.first
    }
  }

  func dropHeldPIN(_ number: Int) throws(ProvisionError) {
    try write { db in try db.execute("DELETE FROM heldPin WHERE number = ?", number) }
  }
}
