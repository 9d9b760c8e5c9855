import FoundationEssentials

/// What an operation that destroys something on a token is about to do, recorded (committed) before its first
/// destructive request and removed when it and its local consequences are done. One whose owner is gone (kill,
/// crash, power loss) is finished or reported at the next start (`IntentRecovery`).
public struct DestructionIntent: Equatable, Sendable {
  public enum Kind: String, Codable, Sendable {
    /// `fido2 reset`: every credential on the key goes.
    case fido2Reset = "fido2-reset"
    /// `fido2 credentials delete`: one discoverable credential goes.
    case fido2CredentialDeletion = "fido2-credential-deletion"
    /// Deregistration of a PIV registration: its slot's key is overwritten by a throwaway key.
    case pivKeyOverwrite = "piv-key-overwrite"
  }

  public var id: Int64
  public var tokenID: String
  public var kind: Kind
  /// The local registrations whose key the operation destroys, as they were when it began.
  public var dependents: [AuthenticatorRecord]
  public var createdAt: Date
}

extension LocalData {
  /// Records (and commits) `kind` on `tokenID`, owned by this process; returns its id for `clearIntent`.
  public func beginIntent(
    _ kind: DestructionIntent.Kind, tokenID: String, dependents: [AuthenticatorRecord]
  ) throws(LocalDataError) -> Int64 {
    let json: String
    do { json = String(decoding: try JSONEncoder().encode(dependents), as: UTF8.self) } catch {
      throw .unavailable(path: path, reason: "encoding an intent: \(type(of: error))")
    }
    return try write { db in
      try db.execute(
        "INSERT INTO intent (tokenID, kind, dependents, ownerPID, ownerStart, createdAt) VALUES (?, ?, ?, ?, ?, ?)",
        tokenID, kind.rawValue, json, owner.pid, owner.start, Date())
      return try db.integer("SELECT last_insert_rowid()") ?? 0
    }
  }

  /// The operation and its local consequences are done (or it ended before destroying anything).
  public func clearIntent(_ id: Int64) throws(LocalDataError) {
    try write { db in try db.execute("DELETE FROM intent WHERE id = ?", id) }
  }

  /// Takes over an interrupted intent for this process, unless another live run took it first (two commands
  /// starting at once finish it once). Returns whether this process now owns it.
  public func claimIntent(_ id: Int64) throws(LocalDataError) -> Bool {
    try write { db in
      let rows = try db.query("SELECT ownerPID, ownerStart FROM intent WHERE id = ?", id) { row throws(SQLiteError) in
        (row.optionalInteger(0), row.optionalInteger(1))
      }
      guard let (pid, start) = rows.first else { return false }
      if let pid, let start, let p = Int32(exactly: pid), ProcessOwner(pid: p, start: start).isAlive { return false }
      try db.execute("UPDATE intent SET ownerPID = ?, ownerStart = ? WHERE id = ?", owner.pid, owner.start, id)
      return true
    }
  }

  /// Intents whose owner is gone: an interrupted operation (a live run's are left alone).
  public func interruptedIntents() throws(LocalDataError) -> [DestructionIntent] {
    let rows = try read { db in
      try db.query(
        "SELECT id, tokenID, kind, dependents, ownerPID, ownerStart, createdAt FROM intent ORDER BY id"
      ) { row throws(SQLiteError) in
        (
          row.optionalInteger(0) ?? 0, try row.text(1), try row.text(2), try row.text(3), row.optionalInteger(4),
          row.optionalInteger(5), try row.date(6)
        )
      }
    }
    var intents: [DestructionIntent] = []
    for (id, tokenID, kind, json, pid, start, createdAt) in rows {
      if let pid, let start, let p = Int32(exactly: pid), ProcessOwner(pid: p, start: start).isAlive { continue }
      // A kind this version does not know is a newer version's: left for it.
      guard let k = DestructionIntent.Kind(rawValue: kind) else { continue }
      // Dependents that cannot be read (a damaged row) leave the intent with none: it is still reported.
      let dependents = (try? JSONDecoder().decode([AuthenticatorRecord].self, from: Data(json.utf8))) ?? []
      intents.append(
        DestructionIntent(id: id, tokenID: tokenID, kind: k, dependents: dependents, createdAt: createdAt))
    }
    return intents
  }
}
