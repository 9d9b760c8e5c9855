import GRDB

extension LocalData {
  /// Schema history. Never edit a registered migration: databases made by older versions replay only the
  /// ones they lack.
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
    // PIV slots we own move to their own table, one row per (token, slot): keyID is the registration using
    // the slot, NULL when the slot is ours but free (its key is dead). The `slot:<token>:<slot>`
    // placeholder records of abandoned slots become such rows. Pending records get their owner (pid and
    // start time); those from before have none, so they count as interrupted.
    m.registerMigration("v3-slots-owners") { db in
      try db.execute(
        sql: """
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
          """)
    }
    // The device's push token (FCM registration token; NULL: push disabled) and the dispatch targets this device
    // created, one per account (server, username), by the id the server gave.
    m.registerMigration("v4-dispatch-targets") { db in
      try db.execute(
        sql: """
          ALTER TABLE device ADD COLUMN pushToken TEXT;
          CREATE TABLE dispatchTarget (
            id TEXT PRIMARY KEY,
            server TEXT NOT NULL,
            username TEXT NOT NULL,
            UNIQUE (server, username));
          """)
    }
    return m
  }
}
