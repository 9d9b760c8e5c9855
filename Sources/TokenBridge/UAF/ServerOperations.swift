import FoundationEssentials
import TokenDevices
import UAFCore

/// Registration, Authentication and Deregistration against a nevisFIDO-compatible server: the SDK
/// operations, each one request → local processing → response, with local data kept consistent.
public struct ServerOperations {
  public let backend: BackendClient
  public var client: UAFClient
  /// Told when an account's dispatch target could not be made after its registration (the registration stands;
  /// `device check` shows MissingDeviceInformationInServer, `device sync` makes it) or not deleted at the server
  /// after its last deregistration (`device check` … MissingDeviceInformationInMobileDevice).
  public var dispatchTargetFailed: ((DeviceServiceError) -> Void)?

  public init(
    configuration: Configuration, server: String, facetID: String?, localData: LocalData, tokens: [DiscoveredToken],
    fido2Keys: [DiscoveredFIDO2] = []
  ) throws(OperationError) {
    do { backend = try BackendClient(server: server, timeout: configuration.networkTimeout) } catch {
      throw .configuration(error)
    }
    let b = backend
    client = UAFClient(
      configuration: configuration, facetID: facetID ?? configuration.facetID ?? backend.origin,
      server: backend.origin, localData: localData, tokens: tokens, fetchFacets: { try b.trustedFacets($0) })
    client.fido2Keys = fido2Keys
  }

  /// Registers `username`; returns the new KeyID. Written pending before it is sent, confirmed after 1200.
  public func register(username: String, verifier: PinUserVerifier) throws(OperationError) -> String {
    let message: String
    do { message = try backend.requestMessage(.reg, context: ["username": username]) } catch { throw .backend(error) }
    let result = try client.process(
      message, expecting: .init(op: .reg, username: username), verifier: verifier, accountSelector: nil)
    guard result.op == .reg, let keyID = result.pendingKeyID, let response = result.responseMessage else {
      throw .message(.unexpectedOperation(expected: .reg, got: result.op))
    }
    do {
      try backend.sendResponse(.reg, response, context: registrationContext())
    } catch {
      try? client.localData.abandon(keyID)
      throw .backend(error)
    }
    do { try client.localData.confirmRegistration(keyID) } catch { throw .localData(error) }
    makeDispatchTarget(username: username)
    return keyID
  }

  /// The registration response's context: this device's id (see `DeviceWire.registrationContext`).
  func registrationContext() -> String? {
    guard let d = try? client.localData.deviceIdentity() else { return nil }
    return DeviceWire.registrationContext(deviceID: d.deviceID)
  }

  /// Makes the account's dispatch target after a confirmed registration (best-effort: failures are reported).
  func makeDispatchTarget(username: String) {
    do {
      try DeviceInformationOperations(localData: client.localData, configuration: client.configuration)
        .ensureDispatchTarget(server: backend.origin, username: username)
    } catch { dispatchTargetFailed?(error) }
  }

  /// Authenticates (`username` nil: username-less, the user picks an account). `transactionText` asks the
  /// server for a transaction confirmation (context field `transaction`, as the UAF conformance adapter).
  public func authenticate(
    username: String?, transactionText: String? = nil, verifier: PinUserVerifier, accountSelector: AccountSelector?
  ) throws(OperationError) -> String {
    var context: [String: String] = [:]
    if let username { context["username"] = username }
    if let transactionText { context["transaction"] = transactionText }
    let message: String
    do { message = try backend.requestMessage(.auth, context: context) } catch { throw .backend(error) }
    let result = try client.process(
      message, expecting: .init(op: .auth), verifier: verifier, accountSelector: accountSelector)
    guard result.op == .auth, let response = result.responseMessage else {
      throw .message(.unexpectedOperation(expected: .auth, got: result.op))
    }
    do { try backend.sendResponse(.auth, response) } catch { throw .backend(error) }
    return result.username ?? ""
  }

  /// Deregisters `username`'s keys at the server (all, or one KeyID) and destroys them on the token.
  public func deregister(username: String, keyID: String? = nil, verifier: PinUserVerifier) throws(OperationError)
    -> [String]
  {
    var context = ["username": username]
    if let keyID { context["keyID"] = keyID }
    let message: String
    do { message = try backend.requestMessage(.dereg, context: context) } catch { throw .backend(error) }
    let target = try? client.localData.dispatchTargets(server: backend.origin).first { $0.username == username }
    let removed = try client.process(
      message, expecting: .init(op: .dereg, username: username, keyID: keyID), verifier: verifier,
      accountSelector: nil
    ).removed
    if let target { removeDispatchTarget(target) }
    return removed
  }

  /// Once an account has no registration left here, its dispatch target goes too (best-effort at the server: one
  /// left there shows as MissingDeviceInformationInMobileDevice, which `device sync` deletes).
  func removeDispatchTarget(_ target: DispatchTargetRecord) {
    let data = client.localData
    guard (try? data.authenticators(server: target.server, username: target.username))?.isEmpty == true else { return }
    do {
      let keys = try data.deviceKeys()
      try DeviceService(server: target.server, timeout: client.configuration.networkTimeout)
        .deleteTarget(target.id, keys: keys)
    } catch let e as DeviceServiceError { dispatchTargetFailed?(e) } catch let e as LocalDataError {
      dispatchTargetFailed?(.localData(e))
    } catch {}
    try? data.removeDispatchTarget(target.id)
  }

  /// Redeems an out-of-band token (QR/link/push payload) and runs the operation it names; the request the
  /// server returns must be for that operation (the redeem URL's). The SDK error kinds: an unknown or expired
  /// token, one redeemed already.
  public func redeem(
    _ payload: OutOfBandPayload, verifier: PinUserVerifier, accountSelector: AccountSelector?
  ) throws(OperationError) -> UAFClientResult {
    // A token is good for one redeem: a registration that could only stop at "several tokens, nobody to ask"
    // stops before it, so the QR code or link still works with --token. (Policy could rule out all but one
    // token, but it is known only after the redeem; asking for --token is the cheaper mistake.)
    let present = client.tokens.map(\.info) + client.fido2Keys.map(\.info)
    if payload.operation == .reg && client.authenticatorSelector == nil && present.count > 1 {
      throw .ambiguous(present)
    }
    let message: String
    do { message = try backend.redeem(token: payload.token, url: payload.redeemURL) } catch {
      switch error {
      case .uafStatus(1491, _): throw .outOfBand(.alreadyRedeemed)
      case .uafStatus(1404, _), .uafStatus(1408, _): throw .outOfBand(.tokenExpired)
      default: throw .backend(error)
      }
    }
    let result = try client.process(
      message, expecting: .init(op: payload.operation), verifier: verifier, accountSelector: accountSelector)
    if let response = result.responseMessage {
      do {
        try backend.sendResponse(result.op, response, context: result.op == .reg ? registrationContext() : nil)
      } catch {
        if let k = result.pendingKeyID { try? client.localData.abandon(k) }
        throw .backend(error)
      }
      if let k = result.pendingKeyID {
        do { try client.localData.confirmRegistration(k) } catch { throw .localData(error) }
        if let u = result.username { makeDispatchTarget(username: u) }
      }
    }
    return result
  }
}
