import FoundationEssentials

/// One disagreement between this device and a server (the SDK's DeviceInformationMismatch kinds, exact names).
public enum DeviceInformationMismatch: Equatable, Sendable {
  /// The server links a credential to this device that the device does not hold.
  case missingAuthenticatorInMobileDevice(server: String, username: String, aaid: String, keyID: String)
  /// The device holds a credential the server does not link to it (or no longer knows).
  case missingAuthenticatorInServer(server: String, username: String, aaid: String, keyID: String)
  /// The server has a dispatch target for this device that the device does not know.
  case missingDeviceInformationInMobileDevice(server: String, username: String, dispatchTargetID: String)
  /// The device's dispatch target for an account is not at the server (`dispatchTargetID` nil: the device has
  /// credentials for the account but no dispatch target was ever made).
  case missingDeviceInformationInServer(server: String, username: String, dispatchTargetID: String?)
  case deviceNameMismatch(server: String, dispatchTargetID: String, nameInServer: String, nameInMobileDevice: String)
  case fcmRegistrationTokenMismatch(
    server: String, dispatchTargetID: String, fcmRegistrationTokenInServer: String?,
    fcmRegistrationTokenInMobileDevice: String?)

  /// The SDK's name of the kind.
  public var kind: String {
    switch self {
    case .missingAuthenticatorInMobileDevice: "MissingAuthenticatorInMobileDevice"
    case .missingAuthenticatorInServer: "MissingAuthenticatorInServer"
    case .missingDeviceInformationInMobileDevice: "MissingDeviceInformationInMobileDevice"
    case .missingDeviceInformationInServer: "MissingDeviceInformationInServer"
    case .deviceNameMismatch: "DeviceNameMismatch"
    case .fcmRegistrationTokenMismatch: "FcmRegistrationTokenMismatch"
    }
  }

  public var server: String {
    switch self {
    case .missingAuthenticatorInMobileDevice(let s, _, _, _), .missingAuthenticatorInServer(let s, _, _, _),
      .missingDeviceInformationInMobileDevice(let s, _, _), .missingDeviceInformationInServer(let s, _, _),
      .deviceNameMismatch(let s, _, _, _), .fcmRegistrationTokenMismatch(let s, _, _, _):
      s
    }
  }

  /// The fields of the kind (the SDK's names), for listings and `--json`. Absent optional values are omitted.
  public var fields: [String: String] {
    switch self {
    case .missingAuthenticatorInMobileDevice(let s, let u, let a, let k),
      .missingAuthenticatorInServer(let s, let u, let a, let k):
      return ["server": s, "username": u, "aaid": a, "keyId": k]
    case .missingDeviceInformationInMobileDevice(let s, let u, let id):
      return ["server": s, "username": u, "dispatchTargetId": id]
    case .missingDeviceInformationInServer(let s, let u, let id):
      var f = ["server": s, "username": u]
      if let id { f["dispatchTargetId"] = id }
      return f
    case .deviceNameMismatch(let s, let id, let inServer, let inDevice):
      return ["server": s, "dispatchTargetId": id, "nameInServer": inServer, "nameInMobileDevice": inDevice]
    case .fcmRegistrationTokenMismatch(let s, let id, let inServer, let inDevice):
      var f = ["server": s, "dispatchTargetId": id]
      if let inServer { f["fcmRegistrationTokenInServer"] = inServer }
      if let inDevice { f["fcmRegistrationTokenInMobileDevice"] = inDevice }
      return f
    }
  }
}

/// What one side knows, for the comparison.
public struct DeviceView: Equatable, Sendable {
  public struct Target: Equatable, Sendable {
    public var id: String
    public var username: String
    public var name: String
    public var pushToken: String?
    public init(id: String, username: String, name: String, pushToken: String?) {
      self.id = id
      self.username = username
      self.name = name
      self.pushToken = pushToken
    }
  }
  public struct Credential: Equatable, Sendable, Hashable {
    public var username: String
    public var aaid: String
    public var keyID: String
    public init(username: String, aaid: String, keyID: String) {
      self.username = username
      self.aaid = aaid
      self.keyID = keyID
    }
  }
  public var targets: [Target]
  public var credentials: [Credential]
  public init(targets: [Target], credentials: [Credential]) {
    self.targets = targets
    self.credentials = credentials
  }
}

/// The SDK's DeviceInformationCheck, as a pure comparison of this device's view with a server's (no I/O).
public enum DeviceInformationCheck {
  /// Every mismatch between `local` (this device at `server`) and `remote` (what the server links to the device),
  /// in a stable order: credentials, then dispatch targets, then their fields.
  public static func mismatches(server: String, local: DeviceView, remote: DeviceView) -> [DeviceInformationMismatch] {
    var out: [DeviceInformationMismatch] = []
    let localKeys = Set(local.credentials.map { $0.aaid.uppercased() + "/" + $0.keyID })
    let remoteKeys = Set(remote.credentials.map { $0.aaid.uppercased() + "/" + $0.keyID })
    for c in remote.credentials where !localKeys.contains(c.aaid.uppercased() + "/" + c.keyID) {
      out.append(
        .missingAuthenticatorInMobileDevice(server: server, username: c.username, aaid: c.aaid, keyID: c.keyID))
    }
    for c in local.credentials where !remoteKeys.contains(c.aaid.uppercased() + "/" + c.keyID) {
      out.append(.missingAuthenticatorInServer(server: server, username: c.username, aaid: c.aaid, keyID: c.keyID))
    }
    let localIDs = Set(local.targets.map(\.id))
    for t in remote.targets where !localIDs.contains(t.id) {
      out.append(.missingDeviceInformationInMobileDevice(server: server, username: t.username, dispatchTargetID: t.id))
    }
    for t in local.targets {
      guard let r = remote.targets.first(where: { $0.id == t.id }) else {
        out.append(.missingDeviceInformationInServer(server: server, username: t.username, dispatchTargetID: t.id))
        continue
      }
      if r.name != t.name {
        out.append(
          .deviceNameMismatch(server: server, dispatchTargetID: t.id, nameInServer: r.name, nameInMobileDevice: t.name))
      }
      if (r.pushToken ?? "") != (t.pushToken ?? "") {
        out.append(
          .fcmRegistrationTokenMismatch(
            server: server, dispatchTargetID: t.id, fcmRegistrationTokenInServer: r.pushToken,
            fcmRegistrationTokenInMobileDevice: t.pushToken))
      }
    }
    // An account with credentials here but no dispatch target at all (its creation failed at registration).
    let withTarget = Set(local.targets.map(\.username))
    var seen: Set<String> = []
    for c in local.credentials where !withTarget.contains(c.username) && seen.insert(c.username).inserted {
      out.append(.missingDeviceInformationInServer(server: server, username: c.username, dispatchTargetID: nil))
    }
    return out
  }
}
