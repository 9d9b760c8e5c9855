import FoundationEssentials
import UAFCore

/// A registration a killed run left: the server may have taken it before the run learnt so. The run's pending local
/// record (abandoned when the local data was next opened, by whichever process, and kept as it was:
/// `LocalData.interruptedRegistrations`) names its KeyID; the server says
/// which KeyIDs it holds for the user in the policy of an authentication request for that user (UAF Protocol v1.1
/// §3.1.1: a server asking a known user to authenticate names the user's registered keys in `keyIDs`; the reference
/// RP and nevisFIDO do). A KeyID the server holds is adopted — its record written back as registered — and never
/// registered a second time.
extension BackendClient {
  /// The KeyIDs the server holds for `username` (empty: none, the server says it knows no registration of the user).
  func registeredKeyIDs(username: String) throws(BackendError) -> Set<String> {
    let message: String
    do { message = try requestMessage(.auth, context: ["username": username]) } catch {
      if case .uafStatus(let code, _) = error, [1401, 1404, 1481].contains(code) { return [] }
      throw error
    }
    guard case .authentication(let r)? = try? UAFMessageCodec.decodeRequest(message, expecting: .auth) else {
      throw .malformedAnswer("authentication request")
    }
    return Set(r.policy.accepted.flatMap { $0.flatMap { $0.keyIDs ?? [] } })
  }
}

extension LocalData {
  /// Writes back as registered a record whose registration the server took after its run was killed (the record was
  /// abandoned when the local data was next opened). A PIV record takes its slot back only while the slot is still
  /// ours and free (nobody reused it meanwhile); false when it could not be adopted.
  func adopt(_ record: AuthenticatorRecord) throws(LocalDataError) -> Bool {
    try write { db in
      if try db.integer("SELECT 1 FROM authenticator WHERE keyID = ?", record.keyID) != nil {
        try db.execute("DELETE FROM interruptedRegistration WHERE keyID = ?", record.keyID)
        return true
      }
      if record.slot >= 0 {
        let free = try db.integer(
          "SELECT 1 FROM slotAssignment WHERE tokenID = ? AND slot = ? AND keyID IS NULL", record.tokenID, record.slot)
        guard free != nil else {
          try db.execute("DELETE FROM interruptedRegistration WHERE keyID = ?", record.keyID)
          return false
        }
      }
      try db.execute("DELETE FROM interruptedRegistration WHERE keyID = ?", record.keyID)
      var r = record
      r.state = .registered
      try r.insert(db)
      if r.slot >= 0 {
        try db.execute("UPDATE slotAssignment SET keyID = ? WHERE tokenID = ? AND slot = ?", r.keyID, r.tokenID, r.slot)
      }
      try syncDeviceInformation(db)
      return true
    }
  }
}
