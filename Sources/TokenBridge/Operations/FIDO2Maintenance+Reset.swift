import FoundationEssentials
import Platform
import TokenDevices
import UAFCore

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

extension FIDO2Maintenance {
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
    // Durable intent: committed before the reset is sent, so a kill from here on is finished at the next start
    // (the credentials probed: gone → the dependents are deregistered and removed there).
    let intent: Int64
    do { intent = try localData.beginIntent(.fido2Reset, tokenID: key.info.id, dependents: plan.dependents) } catch {
      throw .localData(error)
    }
    do { try session.reset() } catch {
      // The key said no (outside its window, no touch, cancelled): nothing was erased. Any other failure (the
      // answer lost) leaves the intent for the next start, which asks the key.
      switch error {
      case .resetNotAllowed, .touchDenied, .touchTimeout, .cancelled: try? localData.clearIntent(intent)
      default: break
      }
      throw .token(error)
    }
    let results = deregister(plan.dependents)
    try? localData.clearIntent(intent)
    return results
  }

  func deregister(_ records: [AuthenticatorRecord]) -> [FIDO2DeregistrationResult] {
    Self.deregister(records, configuration: configuration, localData: localData)
  }

  /// Best effort: each dependent registration is deregistered at its server (the server forgets it), then
  /// removed from local data whatever the server said — its key is gone with the reset.
  static func deregister(_ records: [AuthenticatorRecord], configuration: Configuration, localData: LocalData)
    -> [FIDO2DeregistrationResult]
  {
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
