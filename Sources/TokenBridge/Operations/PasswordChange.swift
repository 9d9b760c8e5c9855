import FoundationEssentials
import TokenDevices
import UAFCore

/// Told to the user while a FIDO2 key waits to be re-inserted (PIN_AUTH_BLOCKED after 3 wrong PINs in a row).
public protocol ReinsertionNotifier {
  /// Shown once: "remove and re-insert your key".
  func reinsertionNeeded(_ token: TokenInfo)
  /// Shown when the key is back.
  func reinserted(_ token: TokenInfo)
}

/// Set and change the PIN of a FIDO2 key: CTAP PINs are passwords, checked with the password policy
/// (the SDKs' PasswordChange). The flow is the PIN-attempt engine's (`PinAttempts`): tries read first (no try
/// spent), values checked before sending, last try confirmed, a wrong PIN recoverable. After 3 wrong PINs in a
/// row the key refuses every PIN until re-inserted: no PIN is sent then; the user is told, and the flow goes on
/// when the same key is back, or stops at the interaction timeout.
public struct PasswordChange {
  public var interactionTimeout: Double

  public init(interactionTimeout: Double = 240) { self.interactionTimeout = interactionTimeout }

  /// `pin set`: a key without a PIN gets one. No try is spent by a refused value, and there is no try to
  /// count: the engine runs with an unknown count that never blocks.
  public func setPIN(on token: DiscoveredFIDO2, changer: PinChanger) throws(OperationError) {
    let info = try fido2Info(token)
    guard !info.pinIsSet else { throw .token(.unsupported("setting a PIN: this key has one (use pin change)")) }
    let policy = PasswordPolicy(minPINLength: info.minPINLength)
    let unknown = PINStatus(kind: .pin, retriesLeft: nil)
    let engine = PinAttempts(
      token: token.info, kind: .pin, known: unknown, readStatus: { () throws(TokenError) in unknown },
      formatRefusal: .invalidNew(.pin, .refusedByToken))
    let _: Bool = try engine.run(
      ask: { round in try changer.providePins(context(token.info, .setPIN, policy, round)) },
      check: { answer in policy.validate(new: answer.new.bytes, old: nil).map { .invalidNew(.pin, $0) } },
      confirmLast: { _ in true },
      attempt: { (answer, _) throws(TokenError) -> Bool? in
        try token.session.setPIN(normalized(answer.new).bytes, old: nil)
        return true
      })
  }

  /// `pin change` on a FIDO2 key.
  public func changePIN(on token: DiscoveredFIDO2, changer: PinChanger, notifier: ReinsertionNotifier)
    throws(OperationError)
  {
    let info = try fido2Info(token)
    guard info.pinIsSet else { throw .token(.pinNotSet) }
    let policy = PasswordPolicy(minPINLength: info.minPINLength)
    let engine = PinAttempts(
      token: token.info, kind: .pin, known: token.info.pin,
      readStatus: { () throws(TokenError) in try token.session.pinStatus() },
      waitForReinsertion: { () throws(OperationError) in try waitForReinsertion(token, notifier) },
      formatRefusal: .invalidNew(.pin, .refusedByToken), coolingDown: { token.session.powerCycleRequired })
    let _: Bool = try engine.run(
      ask: { round in try changer.providePins(context(token.info, .changePIN, policy, round)) },
      check: { answer in
        if let p = TokenFormat.fido2PIN.validate(new: answer.current.bytes, old: nil) {
          return .invalidCurrent(.pin, p)
        }
        return policy.validate(new: answer.new.bytes, old: answer.current.bytes).map { .invalidNew(.pin, $0) }
      },
      confirmLast: { round in try changer.confirmLastAttempt(context(token.info, .changePIN, policy, round)) },
      attempt: { (answer, _) throws(TokenError) -> Bool? in
        try token.session.setPIN(normalized(answer.new).bytes, old: normalized(answer.current).bytes)
        return true
      })
  }

  func context(_ token: TokenInfo, _ op: PinOperation, _ policy: PasswordPolicy, _ round: PinAttempts.Round)
    -> PinChangeContext
  {
    PinChangeContext(
      token: token, operation: op, policy: policy, protection: round.protection, authorizingStatus: round.status,
      lastRecoverableError: round.lastError)
  }

  /// Waits, sending no PIN, until the key has been unplugged and is back (its device node goes and comes back:
  /// inotify, no polling), or the interaction timeout passes; then opens it again.
  func waitForReinsertion(_ token: DiscoveredFIDO2, _ notifier: ReinsertionNotifier) throws(OperationError) {
    let ref = token.session.ref
    let watcher: DeviceNodeWatcher
    do { watcher = try DeviceNodeWatcher(path: ref.path, isVirtual: ref.isVirtual) } catch {
      throw .token(.unsupported("watching for the key's re-insert (inotify: \(error.explanation))"))
    }
    // The key's AAGUID, to know it again (getInfo as the key answered it while opening: no request).
    let expected: String
    do { expected = try token.session.info().aaguid } catch { throw .token(error) }
    // Let go of the node: an open hidraw node keeps its number taken, and the key would come back as another.
    token.session.close()
    notifier.reinsertionNeeded(token.info)
    let path: String
    do { path = try watcher.waitForReplug(timeoutSeconds: interactionTimeout) } catch {
      if case .timedOut = error { throw .timedOut }
      throw .token(.unsupported("watching for the key's re-insert (inotify: \(error.explanation))"))
    }
    do { try token.session.reopen(at: path) } catch { throw .token(error) }
    // The same key (a different one plugged in meanwhile would be asked for the wrong PIN): the reopened
    // session's getInfo is the one its open received.
    if !expected.isEmpty {
      let found: String
      do { found = try token.session.info().aaguid } catch { throw .token(error) }
      guard found == expected else {
        throw .differentKey(token: token.info.id, expectedAAGUID: expected, foundAAGUID: found)
      }
    }
    notifier.reinserted(token.info)
  }

  /// getInfo as the key answered it while opening (no request; asked again only after a change in this command).
  func fido2Info(_ token: DiscoveredFIDO2) throws(OperationError) -> FIDO2Info {
    do { return try token.session.info() } catch { throw .token(error) }
  }

  /// The NFC-normalised bytes of a typed PIN, as a `Secret` (wiped when released).
  func normalized(_ s: Secret) -> Secret { Secret(PasswordPolicy.normalized(s.bytes) ?? s.bytes) }
}
