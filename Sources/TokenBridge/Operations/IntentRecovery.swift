import FoundationEssentials
import TokenDevices
import UAFCore

/// What the next start did about an operation that was interrupted while it destroyed something on a token
/// (`DestructionIntent`). Decided by what the token answers, never guessed: a dependent registration is removed
/// only when the token says its key is gone.
public struct IntentOutcome: Encodable, Sendable, Equatable {
  public enum Result: String, Encodable, Sendable {
    /// The token was asked; the registrations whose key is gone were removed (and deregistered where the server
    /// agreed), the others kept. The record is gone.
    case finished
    /// The token is not here: nothing was decided; the record stays for a later start.
    case tokenAbsent = "token-absent"
    /// The token is here but would not tell (it failed, or a PIV card without GET METADATA and certificate):
    /// the record stays.
    case undecided
  }

  /// A registration whose key the token no longer holds, removed here.
  public struct Removed: Encodable, Sendable, Equatable {
    public var keyID: String
    public var username: String
    public var server: String
    /// nil: done; else why the server did not deregister it (or, when `serverAsked` is false, why it could not
    /// be removed here).
    public var serverFailure: String?
    /// Whether the server was asked (a reset deregisters; a credential deletion or a server-asked
    /// deregistration only removes locally).
    public var serverAsked = true
  }

  public var operation: DestructionIntent.Kind
  public var token: String
  /// When the interrupted operation began (seconds since 1970).
  public var startedAt: Int
  public var result: Result
  public var removed: [Removed]
  /// Registrations whose key the token still holds: they were not touched.
  public var kept: [String]
  /// Why the token could not decide (`tokenAbsent`, `undecided`).
  public var reason: String?
}

extension IntentOutcome {
  /// The operation as a user calls it.
  public var operationName: String {
    switch operation {
    case .fido2Reset: "fido2 reset"
    case .fido2CredentialDeletion: "fido2 credential deletion"
    case .pivKeyOverwrite: "deregistration (the key's overwrite)"
    }
  }

  /// Plain-text lines for the user (the first says what happened, the others each registration).
  public var lines: [String] {
    var out: [String] = []
    switch result {
    case .finished:
      out.append(
        "An interrupted \(operationName) of \(token) was finished: "
          + (removed.isEmpty
            ? "no local registration lost its key."
            : "\(removed.count) local registration(s) whose key is gone from the token were removed."))
      for r in removed {
        let what: String
        if !r.serverAsked {
          what = r.serverFailure.map { "could not be removed here (\($0))." } ?? "removed here."
        } else {
          what =
            r.serverFailure.map { "not deregistered at the server (\($0)); removed here." }
            ?? "deregistered at the server and removed here."
        }
        out.append("  \(displayable(r.username)) at \(displayable(r.server)): " + what)
      }
      if !kept.isEmpty { out.append("  \(kept.count) registration(s) still have their key on the token: kept.") }
    case .tokenAbsent:
      out.append(
        "An interrupted \(operationName) of \(token) could not be checked: the token is not here. Plug it in and "
          + "run `tokenbridge device check` (or any command): the registrations whose key is gone are then removed.")
    case .undecided:
      out.append(
        "An interrupted \(operationName) of \(token) could not be checked (\(reason ?? "the token would not tell")). "
          + "If the token lost the key, remove the registration(s) with `tokenbridge deregister` or "
          + "`tokenbridge local delete`: " + kept.joined(separator: ", ") + ".")
    }
    return out
  }
}

/// The pure part of recovery: which dependents go, from what the token said about each key.
public enum IntentRecovery {
  /// `stillOnToken[keyID]`: true the token holds the key, false it does not, absent it could not tell.
  /// Returns the registrations to remove and those to keep, or nil when any answer is missing (nothing is
  /// decided on half an answer).
  public static func split(_ dependents: [AuthenticatorRecord], stillOnToken: [String: Bool])
    -> (gone: [AuthenticatorRecord], kept: [AuthenticatorRecord])?
  {
    var gone: [AuthenticatorRecord] = []
    var kept: [AuthenticatorRecord] = []
    for d in dependents {
      guard let there = stillOnToken[d.keyID] else { return nil }
      if there { kept.append(d) } else { gone.append(d) }
    }
    return (gone, kept)
  }

  /// Whether a PIV slot still holds the key of `record`, from what the card says of the slot's public key:
  /// nil when it cannot tell (no GET METADATA and no certificate).
  public static func pivKeyStillThere(
    _ record: AuthenticatorRecord, found: (key: [UInt8]?, source: PIVSession.PublicKeySource?, slotEmptyIsKnown: Bool)
  ) -> Bool? {
    if let key = found.key { return key == Array(record.publicKey) }
    return found.slotEmptyIsKnown ? false : nil
  }
}

extension UAFEnvironment {
  /// Finishes or reports every interrupted destruction (`DestructionIntent`) of a run that is gone: the token
  /// named by each is asked (briefly opened, then let go) whether the dependents' keys are still there. Runs at
  /// the start of every command that opens local data through `UAFContext` and of the `fido2` commands.
  public func finishInterruptedOperations(trace: TraceSink?) -> [IntentOutcome] {
    guard let intents = try? localData.interruptedIntents(), !intents.isEmpty else { return [] }
    var outcomes: [IntentOutcome] = []
    for intent in intents {
      guard (try? localData.claimIntent(intent.id)) == true else { continue }
      let outcome = finish(intent, trace: trace)
      if outcome.result == .finished { try? localData.clearIntent(intent.id) }
      outcomes.append(outcome)
    }
    return outcomes
  }

  func finish(_ intent: DestructionIntent, trace: TraceSink?) -> IntentOutcome {
    var outcome = IntentOutcome(
      operation: intent.kind, token: intent.tokenID, startedAt: Int(intent.createdAt.timeIntervalSince1970),
      result: .finished, removed: [],
      kept: [], reason: nil)
    // Only registrations still here matter: one already removed was finished (server first, then local) by the
    // interrupted run itself.
    let present = Set(((try? localData.authenticators(includeAll: true)) ?? []).map(\.keyID))
    let dependents = intent.dependents.filter { present.contains($0.keyID) }
    if dependents.isEmpty { return outcome }
    var answers: [String: Bool] = [:]
    do {
      let tokens = try tokensNow(id: intent.tokenID, trace: trace, details: false, touchCue: { _ in })
      defer { tokens.fido2.forEach { $0.session.close() } }
      for d in dependents {
        if let key = tokens.fido2.first, let cid = d.credentialID {
          answers[d.keyID] = try key.session.knowsCredential(rpID: FIDO2Authenticator.rpID, credentialID: Array(cid))
        } else if let card = tokens.piv.first, d.slot >= 0 {
          let found = try card.session.publicKey(PIVSlot(rawValue: UInt8(d.slot)))
          answers[d.keyID] = IntentRecovery.pivKeyStillThere(d, found: found)
        }
      }
    } catch {
      if case .tokenNotFound = error as? OperationError {
        outcome.result = .tokenAbsent
      } else {
        outcome.result = .undecided
        outcome.reason = ErrorReport(error).message
      }
      outcome.kept = dependents.map(\.keyID)
      return outcome
    }
    guard let (gone, kept) = IntentRecovery.split(dependents, stillOnToken: answers) else {
      outcome.result = .undecided
      outcome.reason = "the token does not show the slot's public key"
      outcome.kept = dependents.map(\.keyID)
      return outcome
    }
    outcome.kept = kept.map(\.keyID)
    switch intent.kind {
    case .fido2Reset:
      // What the reset itself does after the key is erased: deregistration at the server, best effort.
      outcome.removed = FIDO2Maintenance.deregister(gone, configuration: configuration, localData: localData).map {
        IntentOutcome.Removed(
          keyID: $0.record.keyID, username: $0.record.username, server: $0.record.server,
          serverFailure: $0.failure?.message)
      }
    case .fido2CredentialDeletion, .pivKeyOverwrite:
      // A credential deletion tells no server; a deregistration was asked for by the server: local only.
      outcome.removed = gone.map { r in
        var failure: String?
        do throws(LocalDataError) { try localData.delete(r.keyID) } catch {
          failure = ErrorReport(OperationError.localData(error)).message
        }
        return IntentOutcome.Removed(
          keyID: r.keyID, username: r.username, server: r.server, serverFailure: failure, serverAsked: false)
      }
    }
    return outcome
  }
}
