import FoundationEssentials

/// The registration lifecycle: pending (owned by the writing process) → registered, or abandoned (a PIV slot
/// stays ours, free; a FIDO2 record goes). Each step is one locked transaction.
extension LocalData {
  /// Reserves the first of `candidates` that is free in the local data — a slot of ours no registration uses,
  /// or one we hold no assignment for (the caller checked on the token that it is empty) — and writes
  /// `record` there as pending, owned by this process. Choice and write are one locked transaction, so two
  /// runs never get the same slot. Returns the slot, or nil when every candidate is taken.
  public func reserveSlot(candidates: [Int], record: AuthenticatorRecord) throws(LocalDataError) -> Int? {
    try write { db in
      let inUse = Set(
        try db.query("SELECT slot FROM slotAssignment WHERE tokenID = ? AND keyID IS NOT NULL", record.tokenID) {
          row throws(SQLiteError) in try row.int(0)
        })
      guard let slot = candidates.first(where: { $0 >= 0 && !inUse.contains($0) }) else { return nil }
      var r = record
      r.slot = slot
      try insertPending(r, db)
      try db.execute(
        """
        INSERT INTO slotAssignment (tokenID, slot, keyID) VALUES (?, ?, ?)
        ON CONFLICT (tokenID, slot) DO UPDATE SET keyID = excluded.keyID
        """, r.tokenID, slot, r.keyID)
      return slot
    }
  }

  /// Writes the pending record of a registration that needs no slot (a FIDO2 key: slot -1), owned by this
  /// process. PIV records go through `reserveSlot`.
  public func beginRegistration(_ record: AuthenticatorRecord) throws(LocalDataError) {
    precondition(record.slot < 0, "a PIV registration reserves its slot with reserveSlot")
    try write { db in try insertPending(record, db) }
  }

  func insertPending(_ record: AuthenticatorRecord, _ db: SQLiteConnection) throws(SQLiteError) {
    var r = record
    r.state = .pending
    try r.insert(db)
    try db.execute(
      "UPDATE authenticator SET ownerPID = ?, ownerStart = ? WHERE keyID = ?", owner.pid, owner.start, r.keyID)
  }

  /// Stores the public key once the token made it (still pending).
  public func setPublicKey(_ keyID: String, _ key: [UInt8]) throws(LocalDataError) {
    try write { db in
      try db.execute("UPDATE authenticator SET publicKey = ? WHERE keyID = ?", key, keyID)
      if db.changes == 0 { throw LocalDataError.notFound(keyID) }
    }
  }

  /// The server accepted the registration.
  public func confirmRegistration(_ keyID: String) throws(LocalDataError) {
    try write { db in
      try db.execute(
        "UPDATE authenticator SET state = ?, ownerPID = NULL, ownerStart = NULL WHERE keyID = ?",
        AuthenticatorRecord.State.registered.rawValue, keyID)
      if db.changes == 0 { throw LocalDataError.notFound(keyID) }
      try syncDeviceInformation(db)
    }
  }

  /// The record goes. A PIV slot stays ours, free (its key is dead): a later registration reuses it. A FIDO2
  /// key is derived, not stored, so nothing is left behind.
  public func abandon(_ keyID: String) throws(LocalDataError) {
    try write { db in try abandon(keyID, db) }
  }

  /// A registration that ended before anything was written to its slot goes, and so does its claim on the
  /// slot: the slot was empty on the token and stays nobody's (a key someone else puts there later is never
  /// ours to overwrite).
  public func release(_ keyID: String) throws(LocalDataError) {
    try write { db in
      try db.execute("DELETE FROM slotAssignment WHERE keyID = ?", keyID)
      try db.execute("DELETE FROM authenticator WHERE keyID = ?", keyID)
      try syncDeviceInformation(db)
    }
  }

  func abandon(_ keyID: String, _ db: SQLiteConnection) throws {
    try db.execute("UPDATE slotAssignment SET keyID = NULL WHERE keyID = ?", keyID)
    try db.execute("DELETE FROM authenticator WHERE keyID = ?", keyID)
    try syncDeviceInformation(db)
  }

  /// Pending registrations whose owner is gone (killed, crashed, the pid now another process): abandoned,
  /// their slots stay ours. A pending record of a run still going is left alone.
  @discardableResult
  public func repairInterrupted() throws(LocalDataError) -> [AuthenticatorRecord] {
    try write { db in
      let pending = try db.query(
        "SELECT \(AuthenticatorRecord.columns), ownerPID, ownerStart FROM authenticator WHERE state = ? ORDER BY createdAt",
        AuthenticatorRecord.State.pending.rawValue
      ) { row throws(SQLiteError) in
        (try AuthenticatorRecord(row: row), row.optionalInteger(13), row.optionalInteger(14))
      }
      var repaired: [AuthenticatorRecord] = []
      let now = Date()
      for (record, pid, start) in pending {
        if let pid, let start, let p = Int32(exactly: pid), ProcessOwner(pid: p, start: start).isAlive { continue }
        try abandon(record.keyID, db)
        let json = String(decoding: try JSONEncoder().encode(record), as: UTF8.self)
        try db.execute(
          "INSERT OR REPLACE INTO interruptedRegistration (keyID, tokenID, record, repairedAt) VALUES (?, ?, ?, ?)",
          record.keyID, record.tokenID, json, now)
        repaired.append(record)
      }
      try db.execute(
        "DELETE FROM interruptedRegistration WHERE repairedAt < ?", now.addingTimeInterval(-30 * 86_400))
      return repaired
    }
  }

  /// The registrations on `tokenID` that runs left pending when they died (kept by `repairInterrupted`), newest
  /// first: the server may hold one (see `adopt`).
  public func interruptedRegistrations(tokenID: String) throws(LocalDataError) -> [AuthenticatorRecord] {
    try read { db in
      try db.query(
        "SELECT record FROM interruptedRegistration WHERE tokenID = ?", tokenID
      ) { row throws(SQLiteError) in try row.text(0) }
      .compactMap { try? JSONDecoder().decode(AuthenticatorRecord.self, from: Data($0.utf8)) }
      .sorted { $0.createdAt > $1.createdAt }
    }
  }

  /// Forgets interrupted registrations (adopted, or superseded by a registration made again).
  public func forgetInterrupted(keyIDs: [String]) throws(LocalDataError) {
    try write { db in
      for k in keyIDs { try db.execute("DELETE FROM interruptedRegistration WHERE keyID = ?", k) }
    }
  }

  /// The next sign counter for a key, committed before the signature is made (a crash never reuses one).
  public func nextSignCounter(_ keyID: String) throws(LocalDataError) -> UInt32 {
    try write { db in
      try db.execute("UPDATE authenticator SET signCounter = signCounter + 1 WHERE keyID = ?", keyID)
      guard let n = try db.integer("SELECT signCounter FROM authenticator WHERE keyID = ?", keyID) else {
        throw LocalDataError.notFound(keyID)
      }
      return UInt32(truncatingIfNeeded: n)
    }
  }

  /// Forgets a credential locally only (the server keeps it; `deregister` tells both). The slot stays
  /// ours, so its key is overwritten by the next registration rather than left unknown.
  public func delete(_ keyID: String) throws(LocalDataError) {
    try write { db in
      guard try db.integer("SELECT 1 FROM authenticator WHERE keyID = ?", keyID) != nil else {
        throw LocalDataError.notFound(keyID)
      }
      try abandon(keyID, db)
    }
  }
}
