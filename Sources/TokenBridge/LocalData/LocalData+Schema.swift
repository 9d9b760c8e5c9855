import CSQLite

extension LocalData {
  /// Schema history, applied in order. Never edit a registered migration: databases made by older versions
  /// replay only the ones they lack. The applied ones are recorded as GRDB's migrator recorded them (table
  /// `grdb_migrations`, one row per identifier), so databases of versions built on GRDB open here, and the other
  /// way round. The SQL of v1 and v2-device is the SQL GRDB's table builder generated.
  static let migrations: [(identifier: String, sql: String)] = [
    (
      "v1",
      """
      CREATE TABLE "authenticator" ("keyID" TEXT PRIMARY KEY NOT NULL, "aaid" TEXT NOT NULL, \
      "username" TEXT NOT NULL, "server" TEXT NOT NULL, "appID" TEXT NOT NULL, "tokenID" TEXT NOT NULL, \
      "slot" INTEGER NOT NULL, "publicKey" BLOB NOT NULL, "signCounter" INTEGER NOT NULL, "state" TEXT NOT NULL, \
      "createdAt" DATETIME NOT NULL, "credentialID" BLOB, "hmacSalt" BLOB);
      CREATE UNIQUE INDEX authenticator_slot ON authenticator(tokenID, slot) WHERE slot >= 0;
      """  // one record per PIV slot; FIDO2 records (slot -1) may be many per key
    ),
    ("v2-device", #"CREATE TABLE "device" ("deviceID" TEXT PRIMARY KEY NOT NULL, "name" TEXT NOT NULL)"#),
    // PIV slots we own move to their own table, one row per (token, slot): keyID is the registration using
    // the slot, NULL when the slot is ours but free (its key is dead). The `slot:<token>:<slot>`
    // placeholder records of abandoned slots become such rows. Pending records get their owner (pid and
    // start time); those from before have none, so they count as interrupted.
    (
      "v3-slots-owners",
      """
      CREATE TABLE slotAssignment (
        tokenID TEXT NOT NULL,
        slot INTEGER NOT NULL CHECK (slot >= 0),
        keyID TEXT UNIQUE REFERENCES authenticator(keyID) ON DELETE SET NULL,
        PRIMARY KEY (tokenID, slot));
      ALTER TABLE authenticator ADD COLUMN ownerPID INTEGER;
      ALTER TABLE authenticator ADD COLUMN ownerStart INTEGER;
      INSERT INTO slotAssignment (tokenID, slot, keyID)
        SELECT tokenID, slot, CASE WHEN state = 'abandoned' THEN NULL ELSE keyID END
        FROM authenticator WHERE slot >= 0;
      DELETE FROM authenticator WHERE state = 'abandoned';
      """
    ),
    // The device's push token (FCM registration token; NULL: push disabled) and the dispatch targets this device
    // created, one per account (server, username), by the id the server gave.
    (
      "v4-dispatch-targets",
      """
      ALTER TABLE device ADD COLUMN pushToken TEXT;
      CREATE TABLE dispatchTarget (
        id TEXT PRIMARY KEY,
        server TEXT NOT NULL,
        username TEXT NOT NULL,
        UNIQUE (server, username));
      """
    ),
    // Durable intent before destruction: what an operation is about to destroy on a token (a FIDO2 reset, a
    // credential deletion, a PIV key overwritten by deregistration), committed before the first destructive
    // request and removed once the operation and its local consequences are done. One left behind by a run that
    // is gone is finished (or reported) at the next start. `dependents` is the JSON of the local registrations
    // whose key the operation destroys, as they were when it began.
    (
      "v5-intents",
      """
      CREATE TABLE intent (
        id INTEGER PRIMARY KEY,
        tokenID TEXT NOT NULL,
        kind TEXT NOT NULL,
        dependents TEXT NOT NULL,
        ownerPID INTEGER,
        ownerStart INTEGER,
        createdAt DATETIME NOT NULL);
      """
    ),
    // Registrations a run left pending when it died, as they were when repaired: the server may have taken one
    // before the run learnt so, and a later run (`provision`'s rerun) asks it and adopts what it holds. Kept by the
    // repair itself, whichever process makes it, so a record is not lost when another process opens the local
    // data first; dropped once adopted or superseded, and after 30 days.
    (
      "v6-interrupted-registrations",
      """
      CREATE TABLE interruptedRegistration (
        keyID TEXT PRIMARY KEY,
        tokenID TEXT NOT NULL,
        record TEXT NOT NULL,
        repairedAt DATETIME NOT NULL);
      """
    ),
  ]

  /// Applies the migrations the database lacks, each in one immediate transaction with its identifier. As
  /// GRDB's migrator did: foreign keys off while one runs (a table may be rebuilt), and checked in full before
  /// it commits. Identifiers this version does not know (a newer version's) are left alone.
  static func migrate(_ db: SQLiteConnection) throws {
    try db.execute("CREATE TABLE IF NOT EXISTS grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY)")
    let applied = Set(
      try db.query("SELECT identifier FROM grdb_migrations") { row throws(SQLiteError) in try row.text(0) })
    for migration in migrations where !applied.contains(migration.identifier) {
      try db.execute("PRAGMA foreign_keys = OFF")
      defer { try? db.execute("PRAGMA foreign_keys = ON") }
      try db.transaction(.immediate) {
        try db.executeScript(migration.sql)
        try db.execute("INSERT INTO grdb_migrations (identifier) VALUES (?)", migration.identifier)
        let violations = try db.query("PRAGMA foreign_key_check") { row throws(SQLiteError) in try row.text(0) }
        if let table = violations.first {
          throw SQLiteError(
            code: SQLITE_CONSTRAINT | 3 << 8,  // SQLITE_CONSTRAINT_FOREIGNKEY
            message: "FOREIGN KEY constraint violation in table \(table) (migration \(migration.identifier))")
        }
      }
    }
  }
}
