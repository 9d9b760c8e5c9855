import FoundationEssentials
import Platform
import TokenDevices

/// What a provisioning run tells its front end as it goes (a progress line each, or a JSON line with `--json`).
public struct ProvisionEvent: Encodable, Sendable, Equatable {
  public enum Kind: String, Encodable, Sendable {
    case assigned
    case pinSet = "pin-set"
    case registered, adopted, done, failed, pending
    case unusedToken = "unused-token"
    /// `--wait`: rows still without a token (`message`: how many) wait for tokens to be plugged in.
    case waiting
  }
  public var event: Kind
  public var row: Int?
  public var username: String?
  public var token: String?
  public var message: String?
}

/// What every row's work shares: the journal, the sealer, the PIN of `--pin-fd`, the configuration.
struct ProvisionContext: Sendable {
  let journal: ProvisionJournal
  let nonce: String
  let configuration: Configuration
  let dataDirectory: URL
  let server: String?
  let facetID: String?
  let sealer: PinSealer?
  let currentPIN: [UInt8]?
  let timeout: Double
  let emit: @Sendable (ProvisionEvent) -> Void
}

/// One row's work on its token, from the stage the journal has: the PIN (a fresh one sealed and held before it is set;
/// or the token's own), then the registration (adopted when a killed run's was taken by the server). Every step is
/// recorded before the next begins. A failure is the row's alone: its code and sentence go to the journal.
struct ProvisionWork: Sendable {
  let row: ProvisionJournalRow
  /// The pending registration a killed run left on this token (`LocalData.interruptedRegistrations`), if any.
  let interrupted: AuthenticatorRecord?
  /// Where the row's token was in the run's listing: its card's reader, or none for a FIDO2 key (nil: unknown).
  /// Each lookup asks only there (`TokenDiscovery.cardReaders`): rows worked side by side then do not connect to
  /// every card, each waiting for the transactions the others hold.
  var cardReaders: Set<String>? = nil

  var number: Int { row.row.number }
  var side: String { row.sideID ?? row.tokenID ?? "" }

  func run(_ ctx: ProvisionContext) {
    let start = ContinuousClock.now
    let journal = ctx.journal
    do {
      if row.failed { try journal.retry(number) }
      let (pin, fresh) = try pinStep(ctx)
      var registration = (aaid: row.aaid ?? "", keyID: row.keyID ?? "")
      if row.stage < .registered { registration = try registrationStep(ctx, pin: pin) }
      try finishStep(ctx, pin: pin, fresh: fresh, registration: registration)
      try PinVault.drop(nonce: ctx.nonce, number: number, journal: journal)
    } catch {
      let report = ErrorReport(error)
      try? journal.fail(number, code: Int(report.status.rawValue), message: report.message)
      ctx.emit(.init(event: .failed, row: number, username: row.row.username, token: side, message: report.message))
    }
    let d = ContinuousClock.now - start
    try? journal.addSeconds(number, Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18)
  }

  /// The row's token, looked up where the listing saw it; anywhere when it is not there any more (moved to
  /// another reader meanwhile).
  func token() throws(OperationError) -> AnyToken {
    var selection = TokenSelection(includePUK: false)
    selection.discovery.cardReaders = cardReaders
    do { return try selection.chooseAny(id: side, selector: nil) } catch .tokenNotFound where cardReaders != nil {
      return try TokenSelection(includePUK: false).chooseAny(id: side, selector: nil)
    }
  }

  /// The PIN the registration uses, and whether the run made it (sealed in the report); the token has it once this
  /// returns (stage `pinSet`).
  func pinStep(_ ctx: ProvisionContext) throws(OperationError) -> (Secret, fresh: Bool) {
    let journal = ctx.journal
    if row.stage >= .pinSet {
      if row.sealedPin != nil {
        guard
          let held = try provision({ () throws(ProvisionError) in
            try PinVault.take(nonce: ctx.nonce, number: number, journal: journal)
          })
        else { throw .provision(.pinLost(token: side)) }
        return (held, true)
      }
      guard let current = ctx.currentPIN else { throw .provision(.currentPINNeeded(tokens: [side])) }
      return (Secret(current), false)
    }
    let token = try token()
    let state = try ProvisionPIN.state(of: token)
    var note: String? = nil
    var pin: Secret
    var fresh = true
    if row.stage == .pinChosen,
      let held = try provision({ () throws(ProvisionError) in
        try PinVault.take(nonce: ctx.nonce, number: number, journal: journal)
      })
    {
      // A killed run sealed this PIN; the token has it unless the run died before setting it.
      if state == .factory { try ProvisionPIN.set(held.bytes, on: token, timeout: ctx.timeout) }
      pin = held
    } else if state == .factory {
      // (A PIN sealed by a killed run and no longer held never reached the token, which still has its factory
      // PIN: a new one is made and sealed over it.)
      guard let sealer = ctx.sealer else { throw .provision(.recipientNeeded(tokens: [side])) }
      var fresh = ProvisionPIN.fresh(for: token.info)
      defer { wipe(&fresh) }
      let sealed = try provision { () throws(ProvisionError) in try sealer.seal(fresh) }
      try provision { () throws(ProvisionError) in
        try PinVault.hold(fresh, nonce: ctx.nonce, number: number, journal: journal)
        try journal.chosePIN(number, sealed: sealed)
      }
      try ProvisionPIN.set(fresh, on: token, timeout: ctx.timeout)
      pin = Secret(fresh)
      // (A FIDO2 key's note comes with its forcePINChange, once registered: `finishStep`.)
      if token.info.kind == .piv {
        note = "PIV has no forced PIN change: ask the user to change the PIN at first use (tokenbridge pin change)."
      }
    } else {
      if row.stage == .pinChosen { throw .provision(.pinLost(token: side)) }
      guard let current = ctx.currentPIN else { throw .provision(.currentPINNeeded(tokens: [side])) }
      pin = Secret(current)
      fresh = false
    }
    try provision { () throws(ProvisionError) in try journal.advance(number, to: .pinSet, note: note) }
    ctx.emit(.init(event: .pinSet, row: number, username: row.row.username, token: side, message: nil))
    return (pin, fresh)
  }

  /// Registers the row's user (or redeems its payload) with the token; adopts a killed run's registration the
  /// server took. Returns the registration (stage `registered`).
  func registrationStep(_ ctx: ProvisionContext, pin: Secret) throws(OperationError) -> (aaid: String, keyID: String) {
    let journal = ctx.journal
    var env = try UAFEnvironment(configuration: ctx.configuration, dataDirectory: ctx.dataDirectory)
    env.dispatchTargetFailed = nil
    if row.stage == .registering, let record = interrupted {
      let backend: BackendClient
      do { backend = try BackendClient(server: record.server, timeout: ctx.configuration.networkTimeout) } catch {
        throw .configuration(error)
      }
      let held: Set<String>
      do { held = try backend.registeredKeyIDs(username: record.username) } catch { throw .backend(error) }
      if held.contains(record.keyID) {
        let adopted: Bool
        do { adopted = try env.localData.adopt(record) } catch { throw .localData(error) }
        try? env.device.ensureDispatchTarget(server: record.server, username: record.username)
        let note =
          adopted
          ? "The registration of an interrupted run was found at the server and adopted."
          : "The registration of an interrupted run was found at the server; its slot was reused meanwhile."
        try provision { () throws(ProvisionError) in
          try journal.registered(number, aaid: record.aaid, keyID: record.keyID, note: note)
        }
        ctx.emit(.init(event: .adopted, row: number, username: record.username, token: side, message: record.keyID))
        return (record.aaid, record.keyID)
      }
    }
    // Not held by the server: it never took that registration, which is made again (and forgotten once it is).
    try provision { () throws(ProvisionError) in try journal.advance(number, to: .registering) }
    var tokens: UAFTokens
    do {
      tokens = try env.tokens(id: side, trace: nil, details: false, cardReaders: cardReaders, touchCue: { _ in })
    } catch .tokenNotFound where cardReaders != nil {
      tokens = try env.tokens(id: side, trace: nil, details: false, touchCue: { _ in })
    }
    let verifier = ScriptedPins(current: pin.bytes, new: [])
    let keyID: String
    if let payload = row.row.payload {
      let source: OutOfBandSource = payload.contains("://") ? .link(payload) : .qrText(payload)
      let p = try env.outOfBandPayload(source)
      let result = try env.redeem(
        p, tokens: tokens, authenticatorSelector: nil, verifier: verifier, accountSelector: nil)
      guard result.op == .reg, let k = result.pendingKeyID else {
        throw .message(.unexpectedOperation(expected: .reg, got: result.op))
      }
      keyID = k
    } else {
      let ops = try env.operations(
        server: ctx.server, facetID: ctx.facetID, tokens: tokens, authenticatorSelector: nil)
      keyID = try ops.register(username: row.row.username, verifier: verifier)
    }
    let record = try? env.localData.authenticators().first { $0.keyID == keyID }
    let aaid =
      record?.aaid ?? (tokens.infos.first?.kind == .fido2 ? ctx.configuration.fido2AAID : ctx.configuration.pivAAID)
    let note = interrupted.flatMap {
      $0.keyID == keyID ? nil : withdrawLate($0, timeout: ctx.configuration.networkTimeout)
    }
    try provision { () throws(ProvisionError) in try journal.registered(number, aaid: aaid, keyID: keyID, note: note) }
    if let old = interrupted { try? env.localData.forgetInterrupted(keyIDs: [old.keyID]) }
    ctx.emit(.init(event: .registered, row: number, username: row.row.username, token: side, message: keyID))
    return (aaid, keyID)
  }

  /// The row is done. A FIDO2 key given a fresh PIN is first asked to refuse it until it is changed (forcePINChange,
  /// where the key takes authenticatorConfig); last, since a key that refuses its PIN can register nothing. PIV has
  /// no such flag: its note says so (set with the PIN).
  func finishStep(_ ctx: ProvisionContext, pin: Secret, fresh: Bool, registration: (aaid: String, keyID: String))
    throws(OperationError)
  {
    var note: String? = nil
    if fresh, case .fido2(let key) = try token() {
      note =
        try ProvisionPIN.forceChange(pin.bytes, on: key)
        ? "The key refuses this PIN until it is changed (forcePINChange): the user changes it at first use "
          + "(tokenbridge pin change)."
        : "The key cannot be made to refuse this PIN until it is changed (no authenticatorConfig): ask the user to "
          + "change it at first use (tokenbridge pin change)."
    }
    try provision { () throws(ProvisionError) in
      try ctx.journal.finish(number, aaid: registration.aaid, keyID: registration.keyID, note: note)
    }
  }
}

/// A journal or sealing step, its failure as the operation's.
func provision<T>(_ body: () throws(ProvisionError) -> T) throws(OperationError) -> T {
  do { return try body() } catch { throw .provision(error) }
}

extension ProvisionWork {
  /// The killed run's registration may still have been on its way into the server when this run asked for it (a
  /// server goes on with a response whose client is gone, and a busy one may store it seconds later): asked again
  /// once the row's new registration is made, and withdrawn if it landed meanwhile, so the row ends with one
  /// registration. The server forgets a credential when it issues the deregistration request for it (nevisFIDO and
  /// the reference RP do); its local record was never adopted, so nothing here refers to it. One that lands after
  /// this second look is not seen. Returns the row's note.
  func withdrawLate(_ old: AuthenticatorRecord, timeout: Double) -> String? {
    guard let backend = try? BackendClient(server: old.server, timeout: timeout),
      let held = try? backend.registeredKeyIDs(username: old.username), held.contains(old.keyID)
    else { return nil }
    do {
      _ = try backend.requestMessage(.dereg, context: ["username": old.username, "keyID": old.keyID])
      return "The registration of an interrupted run reached the server after this run asked for it and was withdrawn."
    } catch {
      return "The registration of an interrupted run (KeyID \(old.keyID)) reached the server after this run asked "
        + "for it and could not be withdrawn: \(ErrorReport(error).message). Deregister it at the server."
    }
  }
}
