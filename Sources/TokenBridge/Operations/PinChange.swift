import TokenDevices
import UAFCore

/// Change PIN, change PUK, unblock PIN: the mobile SDKs' PIN-change flow for a PIV token, through the
/// PIN-attempt engine (`PinAttempts`): tries read first (no try spent) → current and new value asked → both
/// checked (the current against the card's format, the new against the policy; nothing sent on failure) →
/// the last try confirmed → in one transaction, the tries read again and CHANGE REFERENCE DATA / RESET RETRY
/// COUNTER sent. A wrong current value is recoverable: the next round shows the tries left.
public struct PinChange {
  public var operation: PinOperation
  public var policy: PinPolicy

  public init(operation: PinOperation, policy: PinPolicy? = nil) {
    self.operation = operation
    self.policy = policy ?? (operation.target == .pin ? .pivPIN : .pivPUK)
  }

  public func run(on token: DiscoveredToken, changer: PinChanger) throws(OperationError) {
    let session = token.session
    let detailed = token.detailed
    let kind = operation.authorizing
    let operation = self.operation
    guard operation != .setPIN else {
      throw .token(.unsupported("setting a first PIN (a PIV card always has one: use pin change)"))
    }
    let engine = PinAttempts(
      token: token.info, kind: kind, known: kind == .pin ? token.info.pin : token.info.puk,
      readStatus: { () throws(TokenError) in try session.pinStatus(kind, detailed: detailed) })
    let policy = self.policy
    let _: Bool = try engine.run(
      ask: { round in try changer.providePins(context(token.info, round)) },
      check: { answer in
        if let p = TokenFormat.pivReferenceData.validate(new: answer.current.bytes) {
          return .invalidCurrent(kind, p)
        }
        let old = operation == .unblockPIN ? nil : answer.current.bytes
        return policy.validate(new: answer.new.bytes, old: old).map { .invalidNew(operation.target, $0) }
      },
      confirmLast: { round in try changer.confirmLastAttempt(context(token.info, round)) },
      attempt: { (answer, confirmed) throws(TokenError) -> Bool? in
        try session.transact { () throws(TokenError) -> Bool? in
          // Tries may have been spent by another program since the prompt: read them again first.
          let now = try session.pinStatus(kind, detailed: false)  // the tries are all this check needs
          if now.isBlocked { throw .pinBlocked(kind) }
          if now.retriesLeft == 1 && !confirmed { return nil }
          if operation == .unblockPIN {
            try session.unblockPIN(puk: answer.current.bytes, newPIN: answer.new.bytes)
          } else {
            try session.changeReference(kind, old: answer.current.bytes, new: answer.new.bytes)
          }
          return true
        }
      })
  }

  func context(_ token: TokenInfo, _ round: PinAttempts.Round) -> PinChangeContext {
    PinChangeContext(
      token: token, operation: operation, policy: policy, protection: round.protection,
      authorizingStatus: round.status, lastRecoverableError: round.lastError)
  }
}

extension PinOperation {
  /// Runs this PIN operation on a token of either kind: PIV through `PinChange`, FIDO2 through
  /// `PasswordChange`. A FIDO2 key has no PUK: a blocked PIN needs a reset of the key.
  public func run(on token: AnyToken, changer: PinChanger & ReinsertionNotifier, interactionTimeout: Double)
    throws(OperationError)
  {
    switch token {
    case .piv(let t): try PinChange(operation: self).run(on: t, changer: changer)
    case .fido2(let key):
      let flow = PasswordChange(interactionTimeout: interactionTimeout)
      switch self {
      case .setPIN: try flow.setPIN(on: key, changer: changer)
      case .changePIN: try flow.changePIN(on: key, changer: changer, notifier: changer)
      case .changePUK, .unblockPIN:
        throw .token(.unsupported("a PUK (FIDO2 keys have none; a blocked PIN needs a reset of the key)"))
      }
    }
  }
}
