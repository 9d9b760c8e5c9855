import FoundationEssentials

/// A dispatch target this device created at a server for one account (the SDK's idUsernamePair).
public struct DispatchTargetRecord: Codable, Equatable, Sendable {
  public var id: String
  public var server: String
  public var username: String

  public init(id: String, server: String, username: String) {
    self.id = id
    self.server = server
    self.username = username
  }
}

/// What `device change` does to the push token.
public enum PushTokenChange: Equatable, Sendable {
  case keep
  case set(String)
  case disable
}

extension LocalData {
  func hasPending(_ db: SQLiteConnection) throws(SQLiteError) -> Bool {
    try db.integer("SELECT COUNT(*) FROM authenticator WHERE state = ?", AuthenticatorRecord.State.pending.rawValue)
      ?? 0 > 0
  }

  /// The device information, made now if there is none yet (a registration about to be sent needs the device
  /// id; if it fails, the device information goes again with the last registration).
  public func deviceIdentity() throws(LocalDataError) -> DeviceInformation {
    try write { db in
      if let d = try DeviceInformation.fetch(db) { return d }
      let d = DeviceInformation(
        deviceID: UUID().uuidString.lowercased(), name: "TokenBridge on \(ProcessInfo.processInfo.hostName)")
      try d.insert(db)
      return d
    }
  }

  /// The dispatch targets this device created (at one server, or everywhere).
  public func dispatchTargets(server: String? = nil) throws(LocalDataError) -> [DispatchTargetRecord] {
    try read { db in
      let filter = server == nil ? "" : " WHERE server = ?"
      let arguments: [any SQLiteBindable] = server.map { [$0] } ?? []
      let statement = try db.prepare(
        "SELECT id, server, username FROM dispatchTarget\(filter) ORDER BY server, username")
      try statement.bind(arguments)
      var targets: [DispatchTargetRecord] = []
      while try statement.step() {
        let row = SQLiteRow(statement: statement.handle)
        targets.append(DispatchTargetRecord(id: try row.text(0), server: try row.text(1), username: try row.text(2)))
      }
      return targets
    }
  }

  /// Records the dispatch target made for (server, username), replacing one recorded before for that account.
  public func saveDispatchTarget(_ record: DispatchTargetRecord) throws(LocalDataError) {
    try write { db in
      try db.execute(
        "DELETE FROM dispatchTarget WHERE (server = ? AND username = ?) OR id = ?", record.server, record.username,
        record.id)
      try db.execute(
        "INSERT INTO dispatchTarget (id, server, username) VALUES (?, ?, ?)", record.id, record.server, record.username)
    }
  }

  public func removeDispatchTarget(_ id: String) throws(LocalDataError) {
    try write { db in try db.execute("DELETE FROM dispatchTarget WHERE id = ?", id) }
  }

  /// Sets the device name and/or push token. Throws `notFound` when there is no device information (no
  /// registration yet).
  @discardableResult
  public func changeDevice(name: String?, pushToken: PushTokenChange) throws(LocalDataError) -> DeviceInformation {
    try write { db in
      guard var d = try DeviceInformation.fetch(db) else { throw LocalDataError.notFound("device information") }
      if let name { d.name = name }
      switch pushToken {
      case .keep: break
      case .set(let t): d.pushToken = t
      case .disable: d.pushToken = nil
      }
      try db.execute("UPDATE device SET name = ?, pushToken = ? WHERE deviceID = ?", d.name, d.pushToken, d.deviceID)
      return d
    }
  }
}
