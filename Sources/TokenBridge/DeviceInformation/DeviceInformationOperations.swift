import FoundationEssentials

/// One step of a device-information sync: what it does, on which side.
public enum DeviceSyncAction: Equatable, Sendable {
  /// Delete, at the server, a credential it links to this device (MissingAuthenticatorInMobileDevice).
  case deleteCredentialAtServer(server: String, username: String, aaid: String, keyID: String)
  /// Delete, on this device, a registration the server does not know (MissingAuthenticatorInServer). The key on
  /// the token is dead; its PIV slot stays ours and is reused.
  case deleteCredentialOnDevice(server: String, username: String, aaid: String, keyID: String)
  /// Delete, at the server, a dispatch target this device does not know (MissingDeviceInformationInMobileDevice).
  case deleteTargetAtServer(server: String, username: String, dispatchTargetID: String)
  /// Make the account's dispatch target again at the server (MissingDeviceInformationInServer).
  case createTargetAtServer(server: String, username: String, replacing: String?)
  /// Set the server's copy of the device name and push token to this device's (name / FCM token mismatch).
  case updateTargetAtServer(server: String, dispatchTargetID: String)

  public var deletes: Bool {
    switch self {
    case .deleteCredentialAtServer, .deleteCredentialOnDevice, .deleteTargetAtServer: true
    case .createTargetAtServer, .updateTargetAtServer: false
    }
  }
}

/// The check of one server: its mismatches, or why it could not be checked.
public struct DeviceCheckResult: Sendable {
  public var server: String
  public var mismatches: [DeviceInformationMismatch]
  public var error: DeviceServiceError?
  /// The dispatch target the server accepted a signature from (nil: it knows none of ours).
  var signer: String?
}

/// One outcome of `change` or `sync`.
public struct DeviceStepResult: Sendable {
  public var server: String
  public var what: String
  public var error: DeviceServiceError?
}

/// DeviceInformationChange, DeviceInformationCheck and DeviceInformationSync (the SDK's names), dispatch-target
/// creation at registration, and pending out-of-band operations, over every server this device has accounts at.
public struct DeviceInformationOperations {
  public let localData: LocalData
  public let configuration: Configuration
  public var retry: RetryPolicy = .standard

  public init(localData: LocalData, configuration: Configuration) {
    self.localData = localData
    self.configuration = configuration
  }

  func service(_ server: String) throws(DeviceServiceError) -> DeviceService {
    try DeviceService(server: server, timeout: configuration.networkTimeout, retry: retry)
  }

  func device() throws(DeviceServiceError) -> (DeviceInformation, DeviceKeys) {
    do {
      guard let d = try localData.deviceInformation() else { throw DeviceServiceError.noDeviceInformation }
      return (d, try localData.deviceKeys())
    } catch let e as DeviceServiceError { throw e } catch let e as LocalDataError { throw .localData(e) } catch {
      throw .noDeviceInformation
    }
  }

  /// The servers this device has registrations or dispatch targets at (plus `extra`), sorted.
  public func servers(including extra: String? = nil) throws(DeviceServiceError) -> [String] {
    do {
      var all = Set(try localData.authenticators().map(\.server) + localData.dispatchTargets().map(\.server))
      if let extra { all.insert(try BackendClient(server: extra).origin) }
      return all.sorted()
    } catch let e as LocalDataError { throw .localData(e) } catch { throw .backend(.insecureURL(extra ?? "")) }
  }

  /// After a registration of `username` at `server` was confirmed: makes the account's dispatch target there
  /// unless this device has one already.
  public func ensureDispatchTarget(server: String, username: String) throws(DeviceServiceError) {
    let (d, keys) = try device()
    let existing: [DispatchTargetRecord]
    do { existing = try localData.dispatchTargets(server: server) } catch { throw .localData(error) }
    if existing.contains(where: { $0.username == username }) { return }
    let id = try service(server).createTarget(username: username, device: d, keys: keys)
    do { try localData.saveDispatchTarget(.init(id: id, server: server, username: username)) } catch {
      throw .localData(error)
    }
  }

  /// This device's view of `server`.
  func localView(_ server: String, _ d: DeviceInformation) throws(DeviceServiceError) -> (
    DeviceView, [DispatchTargetRecord]
  ) {
    do {
      let targets = try localData.dispatchTargets(server: server)
      let creds = try localData.authenticators(server: server)
      return (
        DeviceView(
          targets: targets.map { .init(id: $0.id, username: $0.username, name: d.name, pushToken: d.pushToken) },
          credentials: creds.map { .init(username: $0.username, aaid: $0.aaid, keyID: $0.keyID) }), targets
      )
    } catch { throw .localData(error) }
  }

  /// DeviceInformationCheck: the mismatches at each server (one result per server; a server that cannot be
  /// asked carries its error and no mismatches).
  public func check(servers: [String]) throws(DeviceServiceError) -> [DeviceCheckResult] {
    let (d, keys) = try device()
    return servers.map { server in
      do throws(DeviceServiceError) {
        let (local, targets) = try localView(server, d)
        let fetched = try service(server).fetchDevice(d, targets: targets, keys: keys)
        // A server that knows none of this device's targets cannot be asked which credentials it links to the
        // device: its credentials are not compared (never a local deletion on a guess), only the targets are.
        let remote = fetched?.view ?? DeviceView(targets: [], credentials: local.credentials)
        return DeviceCheckResult(
          server: server,
          mismatches: DeviceInformationCheck.mismatches(server: server, local: local, remote: remote),
          error: nil, signer: fetched?.signer)
      } catch { return DeviceCheckResult(server: server, mismatches: [], error: error, signer: nil) }
    }
  }

  /// DeviceInformationSync's plan: what fixes each mismatch (one update per dispatch target).
  public static func plan(_ mismatches: [DeviceInformationMismatch]) -> [DeviceSyncAction] {
    var actions: [DeviceSyncAction] = []
    for m in mismatches {
      let a: DeviceSyncAction
      switch m {
      case .missingAuthenticatorInMobileDevice(let s, let u, let aaid, let k):
        a = .deleteCredentialAtServer(server: s, username: u, aaid: aaid, keyID: k)
      case .missingAuthenticatorInServer(let s, let u, let aaid, let k):
        a = .deleteCredentialOnDevice(server: s, username: u, aaid: aaid, keyID: k)
      case .missingDeviceInformationInMobileDevice(let s, let u, let id):
        a = .deleteTargetAtServer(server: s, username: u, dispatchTargetID: id)
      case .missingDeviceInformationInServer(let s, let u, let id):
        a = .createTargetAtServer(server: s, username: u, replacing: id)
      case .deviceNameMismatch(let s, let id, _, _), .fcmRegistrationTokenMismatch(let s, let id, _, _):
        a = .updateTargetAtServer(server: s, dispatchTargetID: id)
      }
      if !actions.contains(a) { actions.append(a) }
    }
    return actions
  }

  /// DeviceInformationSync: runs `actions` best-effort (each one, whatever the others did); one result each.
  /// `checks` are the results the plan was made from (they name the target each server accepts signatures of).
  public func sync(_ actions: [DeviceSyncAction], checks: [DeviceCheckResult]) throws(DeviceServiceError)
    -> [DeviceStepResult]
  {
    let (d, keys) = try device()
    return actions.map { action in
      let server: String
      switch action {
      case .deleteCredentialAtServer(let s, _, _, _), .deleteCredentialOnDevice(let s, _, _, _),
        .deleteTargetAtServer(let s, _, _), .createTargetAtServer(let s, _, _), .updateTargetAtServer(let s, _):
        server = s
      }
      do throws(DeviceServiceError) {
        try run(action, device: d, keys: keys, signer: checks.first { $0.server == server }?.signer)
        return DeviceStepResult(server: server, what: Self.describe(action), error: nil)
      } catch { return DeviceStepResult(server: server, what: Self.describe(action), error: error) }
    }
  }

  func run(_ action: DeviceSyncAction, device d: DeviceInformation, keys: DeviceKeys, signer: String?)
    throws(DeviceServiceError)
  {
    switch action {
    case .deleteCredentialAtServer(let s, _, let aaid, let k):
      guard let signer else { throw .noDispatchTarget(server: s) }
      try service(s).deleteCredential(aaid: aaid, keyID: k, device: d, signer: signer, keys: keys)
    case .deleteCredentialOnDevice(_, _, _, let k):
      do { try localData.delete(k) } catch { throw .localData(error) }
    case .deleteTargetAtServer(let s, _, let id):
      try service(s).deleteTarget(id, keys: keys)
    case .createTargetAtServer(let s, let u, let old):
      let id = try service(s).createTarget(username: u, device: d, keys: keys)
      do {
        if let old { try localData.removeDispatchTarget(old) }
        try localData.saveDispatchTarget(.init(id: id, server: s, username: u))
      } catch { throw .localData(error) }
    case .updateTargetAtServer(let s, let id):
      try service(s).modifyTarget(id, name: d.name, pushToken: d.pushToken, keys: keys)
    }
  }

  /// One line saying what an action does and on which side (shown before a sync asks).
  public static func describe(_ a: DeviceSyncAction) -> String {
    let d = displayable
    return switch a {
    case .deleteCredentialAtServer(let s, let u, let aaid, let k):
      "delete at the server \(d(s)): the credential \(d(aaid)) \(d(k)) of \(d(u))"
    case .deleteCredentialOnDevice(let s, let u, let aaid, let k):
      "delete on this device: the registration \(d(aaid)) \(d(k)) of \(d(u)) at \(d(s))"
    case .deleteTargetAtServer(let s, let u, let id):
      "delete at the server \(d(s)): the dispatch target \(d(id)) of \(d(u))"
    case .createTargetAtServer(let s, let u, _):
      "create at the server \(d(s)): the dispatch target of \(d(u))"
    case .updateTargetAtServer(let s, let id):
      "update at the server \(d(s)): the device name and push token of the dispatch target \(d(id))"
    }
  }

  /// DeviceInformationChange: the new name and/or push token, at every server, then here. Nothing changes here
  /// when every server refused; when some accepted, this device takes the new values and the refusals are
  /// returned (a later `sync` brings the others in line).
  public func change(name: String?, pushToken: PushTokenChange) throws(DeviceServiceError) -> [DeviceStepResult] {
    var (d, keys) = try device()
    if let name { d.name = name }
    switch pushToken {
    case .keep: break
    case .set(let t): d.pushToken = t
    case .disable: d.pushToken = nil
    }
    let targets: [DispatchTargetRecord]
    do { targets = try localData.dispatchTargets() } catch { throw .localData(error) }
    var results: [DeviceStepResult] = []
    for t in targets {
      do throws(DeviceServiceError) {
        try service(t.server).modifyTarget(t.id, name: d.name, pushToken: d.pushToken, keys: keys)
        results.append(.init(server: t.server, what: "dispatch target \(t.id) (\(t.username))", error: nil))
      } catch {
        results.append(.init(server: t.server, what: "dispatch target \(t.id) (\(t.username))", error: error))
      }
    }
    if let first = results.first?.error, results.allSatisfy({ $0.error != nil }) { throw first }
    do { try localData.changeDevice(name: name, pushToken: pushToken) } catch { throw .localData(error) }
    return results
  }

  /// Pending out-of-band operations at each server (operations, and one error per server that failed).
  public func pending(servers: [String]) throws(DeviceServiceError) -> (
    operations: [PendingOutOfBandOperation], errors: [(server: String, error: DeviceServiceError)]
  ) {
    let (d, keys) = try device()
    var ops: [PendingOutOfBandOperation] = []
    var errors: [(String, DeviceServiceError)] = []
    for s in servers {
      do throws(DeviceServiceError) {
        let targets: [DispatchTargetRecord]
        do { targets = try localData.dispatchTargets(server: s) } catch { throw .localData(error) }
        ops += try service(s).pendingOperations(d, targets: targets, keys: keys)
      } catch { errors.append((s, error)) }
    }
    return (ops.sorted { $0.creationTimeInEpochMillis < $1.creationTimeInEpochMillis }, errors)
  }
}
