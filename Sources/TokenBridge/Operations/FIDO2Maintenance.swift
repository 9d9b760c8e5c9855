import FoundationEssentials
import Platform
import TokenDevices
import UAFCore

/// What `fido2 info` shows: what `fido2-token -I` shows, in one value.
public struct FIDO2KeyReport: Codable, Sendable, Equatable {
  public var token: String
  public var name: String
  public var path: String?
  public var aaguid: String
  public var versions: [String]
  public var extensions: [String]
  public var options: [String: Bool]
  public var pinProtocols: [Int]
  public var minPINLength: Int
  public var forcePINChange: Bool
  /// PIN tries left (nil: no PIN set, or the key would not say).
  public var pinRetries: Int?
  /// In its cool-down: the key takes no PIN until it is re-inserted (`PINStatus.powerCycleRequired`).
  public var powerCycleRequired: Bool?
  /// Built-in UV (fingerprint) tries left, keys with UV only.
  public var uvRetries: Int?
  public var remainingDiscoverableCredentials: Int?
  public var firmwareVersion: UInt64?
  public var maxMsgSize: UInt64?
  public var supportsCredentialManagement: Bool
}

/// A discoverable credential on a key, with whether TokenBridge made it.
public struct FIDO2CredentialListing: Codable, Sendable, Equatable {
  public var credential: FIDO2ResidentCredential
  /// The credential ID, base64url (what `fido2 credentials delete` takes).
  public var id: String
  /// Made by TokenBridge: its RP is TokenBridge's own, or a registration in local data holds its ID.
  public var createdByTokenBridge: Bool
  /// The local registrations (KeyIDs) that use it.
  public var registrations: [String]
}

/// What a reset of a key would destroy, shown before the user confirms.
public struct FIDO2ResetPlan: Sendable, Equatable {
  public var token: TokenInfo
  public var aaguid: String
  /// A serial number, where the key reports one (libfido2 exposes none for FIDO2 keys; always nil today).
  public var serial: String?
  /// Discoverable credentials need the PIN to be listed (credential management, CTAP 2.1 §6.8): a reset
  /// cannot show them without one. How many more fit, when the key says.
  public var remainingDiscoverableCredentials: Int?
  /// UAF registrations in local data whose key derives from a credential on this key.
  public var dependents: [AuthenticatorRecord]
  /// Credential IDs this key was seen to know (the silent probe), checked again on the key that comes back.
  public var knownCredentialIDs: [[UInt8]]
  /// How the key that comes back after the replug is recognised as this one.
  public var sameKeyCheck: SameKeyCheck

  public enum SameKeyCheck: Sendable, Equatable {
    /// AAGUID and the credentials of `dependents` (a credential ID one key made is refused by every other).
    case aaguidAndCredentials
    /// AAGUID only: no credential of ours is on the key, so another key of the same model would pass.
    case aaguidOnly
  }
}

/// What happened to one dependent registration after the reset.
public struct FIDO2DeregistrationResult: Sendable, Equatable {
  public var record: AuthenticatorRecord
  /// nil: the server deregistered it; else why not (the registration is removed locally all the same).
  public var failure: ErrorReport?
}

/// The reset flow talks to the user through this (the CLI: the terminal, or --pin-fd for the typed answer).
public protocol FIDO2ResetInteraction {
  /// Shows `plan` and returns what the user typed to confirm; only the key's id, typed in full, confirms.
  func confirmReset(_ plan: FIDO2ResetPlan) throws -> String
  /// Remove the key and insert it again; the reset must follow within the key's window.
  func replugNeeded(_ plan: FIDO2ResetPlan)
  /// The key is back and is the same one; the reset is being sent. `canceller` stops the wait for the touch.
  func keyIsBack(_ plan: FIDO2ResetPlan, canceller: Canceller)
  /// The key waits for a touch to reset.
  func touchToReset(_ plan: FIDO2ResetPlan)
}

/// FIDO2 key maintenance: info, discoverable credentials (list, delete), and the guided reset.
public struct FIDO2Maintenance {
  public let localData: LocalData
  public let configuration: Configuration
  /// Bound of every wait for the user (typing, replugging).
  public var interactionTimeout: Double

  public init(environment: UAFEnvironment, interactionTimeout: Double) {
    localData = environment.localData
    configuration = environment.configuration
    self.interactionTimeout = interactionTimeout
  }

  // MARK: info

  public static func report(_ key: DiscoveredFIDO2) throws(OperationError) -> FIDO2KeyReport {
    let info: FIDO2Info
    do { info = try key.session.info() } catch { throw .token(error) }
    // Discovery read the tries a moment ago when a PIN is set (`key.info.pin`); ask again only for a key with PIN
    // support and no PIN, whose count discovery did not read.
    let status =
      info.pinIsSet && key.info.pin?.retriesLeft != nil
      ? key.info.pin : info.supportsPIN ? try? key.session.pinStatus() : nil
    return FIDO2KeyReport(
      token: key.info.id, name: key.info.name, path: key.info.reader, aaguid: info.aaguid, versions: info.versions,
      extensions: info.extensions, options: info.options, pinProtocols: info.pinProtocols,
      minPINLength: info.minPINLength, forcePINChange: info.forcePINChange, pinRetries: status?.retriesLeft,
      powerCycleRequired: status?.powerCycleRequired,
      uvRetries: key.session.uvRetries(info),
      remainingDiscoverableCredentials: info.remainingDiscoverableCredentials, firmwareVersion: info.firmwareVersion,
      maxMsgSize: info.maxMsgSize,
      supportsCredentialManagement: info.options["credMgmt"] == true || info.options["credentialMgmtPreview"] == true)
  }

  // MARK: credentials

  /// Lists the discoverable credentials (PIN through the PIN-attempt engine).
  public func credentials(_ key: DiscoveredFIDO2, verifier: PinUserVerifier) throws(OperationError)
    -> [FIDO2CredentialListing]
  {
    try requireCredentialManagement(key)
    let session = key.session
    let creds = try FIDO2Authenticator.withPIN(
      key: key, timeout: interactionTimeout, purpose: "list the credentials on the key", verifier: verifier
    ) { (pin) throws(TokenError) in try session.residentCredentials(pin: pin) }
    return try annotate(creds)
  }

  /// Deletes the discoverable credential `id` (base64url or hex) after `confirm` said yes to it. Returns it.
  public func deleteCredential(
    _ key: DiscoveredFIDO2, id: String, verifier: PinUserVerifier,
    confirm: (FIDO2CredentialListing) throws -> Bool
  ) throws(OperationError) -> FIDO2CredentialListing {
    try requireCredentialManagement(key)
    let session = key.session
    // The PIN is kept (wiped when released) so the user types it once for the listing and the deletion.
    let (pin, creds) = try FIDO2Authenticator.withPIN(
      key: key, timeout: interactionTimeout, purpose: "delete a credential on the key", verifier: verifier
    ) { (pin) throws(TokenError) in (Secret(pin), try session.residentCredentials(pin: pin)) }
    let wanted = Self.credentialIDBytes(id)
    guard let hit = try annotate(creds).first(where: { Array($0.credential.credentialID) == wanted }) else {
      throw .token(.noCredential(operation: "deleteCredential"))
    }
    let yes: Bool
    do { yes = try confirm(hit) } catch { throw mapInteraction(error) }
    guard yes else { throw .declined }
    do { try session.deleteResidentCredential(hit.credential.credentialID, pin: pin.bytes) } catch {
      throw .token(error)
    }
    // The local registrations that used it cannot sign any more: forget them (the server is not told; the user
    // can deregister those accounts).
    for k in hit.registrations { try? localData.delete(k) }
    return hit
  }

  /// Credential management goes through libfido2 (the one part of TokenBridge's FIDO2 that does): a missing libfido2
  /// is said before the PIN is asked.
  func requireCredentialManagement(_ key: DiscoveredFIDO2) throws(OperationError) {
    let info: FIDO2Info
    do {
      try FIDO2Session.loadLibrary()
      info = try key.session.info()
    } catch { throw .token(error) }
    guard info.options["credMgmt"] == true || info.options["credentialMgmtPreview"] == true else {
      throw .token(.unsupported("credential management (CTAP 2.1 credMgmt)"))
    }
  }

  func annotate(_ creds: [FIDO2ResidentCredential]) throws(OperationError) -> [FIDO2CredentialListing] {
    let records: [AuthenticatorRecord]
    do { records = try localData.authenticators(includeAll: true) } catch { throw .localData(error) }
    return creds.map { c in
      let regs = records.filter { $0.credentialID.map(Array.init) == c.credentialID }.map(\.keyID)
      return FIDO2CredentialListing(
        credential: c, id: Base64URL.encode(c.credentialID),
        createdByTokenBridge: c.rpID == FIDO2Authenticator.rpID || !regs.isEmpty, registrations: regs)
    }
  }

  /// A credential ID as typed: base64url (as listed) or hex.
  static func credentialIDBytes(_ s: String) -> [UInt8]? {
    let t = Trim.whitespace(s, newlines: false)
    if t.count % 2 == 0, t.allSatisfy(\.isHexDigit) {
      var out: [UInt8] = []
      var i = t.startIndex
      while i < t.endIndex {
        let j = t.index(i, offsetBy: 2)
        guard let b = UInt8(t[i..<j], radix: 16) else { return nil }
        out.append(b)
        i = j
      }
      return out
    }
    return Base64URL.decode(t)
  }

  // MARK: reset

  /// What a reset of `key` destroys: the local registrations whose credential the key knows (asked with the
  /// silent probe: no PIN, no touch) — or, when the key cannot be asked, those recorded for its id.
  public func resetPlan(_ key: DiscoveredFIDO2) throws(OperationError) -> FIDO2ResetPlan {
    let info: FIDO2Info
    do { info = try key.session.info() } catch { throw .token(error) }
    let records: [AuthenticatorRecord]
    do { records = try localData.authenticators(includeAll: true) } catch { throw .localData(error) }
    var dependents: [AuthenticatorRecord] = []
    var known: [[UInt8]] = []
    for r in records {
      guard let cid = r.credentialID else { continue }
      do {
        if try key.session.knowsCredential(rpID: FIDO2Authenticator.rpID, credentialID: Array(cid)) {
          dependents.append(r)
          known.append(Array(cid))
        }
      } catch {
        if r.tokenID == key.info.id { dependents.append(r) }
      }
    }
    return FIDO2ResetPlan(
      token: key.info, aaguid: info.aaguid, serial: nil,
      remainingDiscoverableCredentials: info.remainingDiscoverableCredentials, dependents: dependents,
      knownCredentialIDs: known, sameKeyCheck: known.isEmpty ? .aaguidOnly : .aaguidAndCredentials)
  }

  /// The guided reset: plan → typed confirmation (the key id in full) → remove and re-insert (device events,
  /// bounded) → the same key? (AAGUID, and the credentials it knew) → reset inside the window, with the touch
  /// cue → deregistration of the dependent registrations at their servers (best effort) and their removal from
  /// local data. Anything before the reset itself failing leaves key and local data as they were.
  public func reset(_ key: DiscoveredFIDO2, interaction: FIDO2ResetInteraction) throws(OperationError)
    -> [FIDO2DeregistrationResult]
  {
    let plan = try resetPlan(key)
    let typed: String
    do { typed = try interaction.confirmReset(plan) } catch { throw mapInteraction(error) }
    guard Trim.whitespace(typed) == key.info.id else { throw .declined }

    let ref = key.session.ref
    let watcher: DeviceNodeWatcher
    do { watcher = try DeviceNodeWatcher(path: ref.path, isVirtual: ref.isVirtual) } catch {
      throw .token(.unsupported("watching for the key's re-insert (inotify: \(error.explanation))"))
    }
    key.session.close()  // let go of the device before it goes
    interaction.replugNeeded(plan)
    let path: String
    do { path = try watcher.waitForReplug(timeoutSeconds: interactionTimeout) } catch {
      if case .timedOut = error { throw .timedOut }
      throw .token(.unsupported("watching for the key's re-insert (inotify: \(error.explanation))"))
    }
    let session: FIDO2Session
    do {
      session = try FIDO2Session(
        FIDO2DeviceRef(path: path, product: ref.product, isVirtual: ref.isVirtual), deadlines: key.session.deadlines)
    } catch { throw .token(error) }
    session.trace = key.session.trace
    let info: FIDO2Info
    do { info = try session.info() } catch { throw .token(error) }
    guard info.aaguid == plan.aaguid else {
      throw .differentKey(token: key.info.id, expectedAAGUID: plan.aaguid, foundAAGUID: info.aaguid)
    }
    for cid in plan.knownCredentialIDs {
      let knows: Bool
      do { knows = try session.knowsCredential(rpID: FIDO2Authenticator.rpID, credentialID: cid) } catch {
        throw .token(error)
      }
      guard knows else {
        throw .differentKey(token: key.info.id, expectedAAGUID: plan.aaguid, foundAAGUID: info.aaguid)
      }
    }
    interaction.keyIsBack(plan, canceller: session.canceller)
    session.touchCue = { interaction.touchToReset(plan) }
    do { try session.reset() } catch { throw .token(error) }
    return deregister(plan.dependents)
  }

  /// Best effort: each dependent registration is deregistered at its server (the server forgets it), then
  /// removed from local data whatever the server said — its key is gone with the reset.
  func deregister(_ records: [AuthenticatorRecord]) -> [FIDO2DeregistrationResult] {
    records.map { r in
      var failure: ErrorReport?
      do {
        let ops = try ServerOperations(
          configuration: configuration, server: r.server, facetID: nil, localData: localData, tokens: [])
        _ = try ops.deregister(username: r.username, keyID: r.keyID, verifier: NoPINAfterReset())
      } catch {
        failure = ErrorReport(error)
      }
      do throws(LocalDataError) {
        // The deregistration removed it already when the server asked for it.
        if try localData.authenticators(includeAll: true).contains(where: { $0.keyID == r.keyID }) {
          try localData.delete(r.keyID)
        }
      } catch {
        if failure == nil { failure = ErrorReport(OperationError.localData(error)) }
      }
      return FIDO2DeregistrationResult(record: r, failure: failure)
    }
  }
}

/// The key was just reset: there is no PIN to ask for (a deregistration without the key asks none anyway).
struct NoPINAfterReset: PinUserVerifier {
  func providePin(_ context: PinVerificationContext) throws -> Secret { throw InteractionError.cancelled }
  func confirmLastAttempt(_ context: PinVerificationContext) throws -> Bool { false }
}

extension TokenSelection {
  /// The FIDO2 key a command works on: the one named by `--token`, the only one, or the user's choice.
  public func chooseFIDO2(id: String?, selector: TokenSelector?) throws(OperationError) -> DiscoveredFIDO2 {
    try wait.run(id: id) { () throws(OperationError) in try chooseFIDO2Now(id: id, selector: selector) }
  }

  func chooseFIDO2Now(id: String?, selector: TokenSelector?, aliasing: Bool = true) throws(OperationError)
    -> DiscoveredFIDO2
  {
    if let id, aliasing {
      // The PIV card's id of a token that is also a FIDO2 key (one USB device) names that key; the first
      // discovery's sessions are closed before the second one looks.
      do throws(OperationError) {
        return try chooseFIDO2Now(id: id, selector: selector, aliasing: false)
      } catch {
        switch error {
        case .tokenNotFound, .token(.unsupported): break
        default: throw error
        }
        guard let other = discovery.sibling(of: id) else { throw error }
        return try chooseFIDO2Now(id: other, selector: selector, aliasing: false)
      }
    }
    var discovery = discovery
    discovery.onlyID = id
    let result: DiscoveryResult
    do { result = try discovery.discover() } catch { throw .token(error) }
    let keys = result.fido2Found
    if let id {
      if let hit = keys.first(where: { $0.info.id == id }) { return hit }
      if let u = result.unusableCards.first(where: { $0.id == id }) { throw .token(u.reason) }
      if result.found.contains(where: { $0.info.id == id }) {
        throw .token(.unsupported("FIDO2 commands (\(id) is a PIV card)"))
      }
      throw .tokenNotFound(id, available: result.tokens)
    }
    switch keys.count {
    case 0:
      if let missing = Self.missingLibrary(result.unusableCards) { throw .token(missing) }
      throw .noToken(
        readers: 0, emptyReaders: [],
        unusable: result.unusableCards.filter { $0.id?.hasPrefix("fido2-") == true }.map {
          "\($0.reader): \(ErrorReport.unusable($0.reason))"
        })
    case 1: return keys[0]
    default:
      guard let selector else { throw .ambiguous(keys.map(\.info)) }
      let chosen: TokenInfo
      do { chosen = try selector.selectToken(from: keys.map(\.info)) } catch { throw mapInteraction(error) }
      guard let hit = keys.first(where: { $0.info.id == chosen.id }) else { throw .cancelled }
      return hit
    }
  }
}
