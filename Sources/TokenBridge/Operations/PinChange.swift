import TokenDevices
import UAFCore

/// Change PIN, change PUK, unblock PIN: the mobile SDKs' PIN-change flow for a PIV token.
///
/// Each round: read the tries left (no try spent) → ask (current, new, confirmed) → check the new value
/// against the policy (nothing sent on failure) → if this is the last try, warn and require a yes → in one
/// transaction, read the tries again and send CHANGE REFERENCE DATA / RESET RETRY COUNTER (SELECT + 2 APDUs).
/// A wrong current value is recoverable: the next round shows the tries left.
public struct PinChange {
  public var operation: PinOperation
  public var policy: PinPolicy

  public init(operation: PinOperation, policy: PinPolicy? = nil) {
    self.operation = operation
    self.policy = policy ?? (operation.target == .pin ? .pivPIN : .pivPUK)
  }

  public func run(on token: DiscoveredToken, changer: PinChanger) throws(OperationError) {
    let session = token.session
    let kind = operation.authorizing
    var lastError: PinChangeRecoverableError?
    var lastAttemptConfirmed = false
    // Discovery read the tries a moment ago, and a wrong attempt reports them (63Cx): read only when unknown.
    var known: PINStatus? = kind == .pin ? token.info.pin : token.info.puk
    while true {
      let status: PINStatus
      if let known { status = known } else { status = try read(session, kind) }
      known = nil
      if status.isBlocked { throw .blocked(kind, token: token.info) }
      var context = PinChangeContext(
        token: token.info, operation: operation, policy: policy,
        protection: .from(retriesLeft: status.retriesLeft, lastAttemptFailed: lastError.isWrongCurrent),
        authorizingStatus: status, lastRecoverableError: lastError)
      let answer: PinChangeAnswer
      do { answer = try changer.providePins(context) } catch { throw mapInteraction(error) }

      if let problem = policy.validate(
        new: answer.new.bytes, old: operation == .unblockPIN ? nil : answer.current.bytes)
      {
        lastError = .invalidNew(problem)
        continue
      }
      if answer.current.isEmpty || answer.current.bytes.count > 8 {
        lastError = .invalidCurrent(reason: answer.current.isEmpty ? "it is empty" : "it is longer than 8 characters")
        continue
      }
      if context.protection.isLastAttempt && !lastAttemptConfirmed {
        do { lastAttemptConfirmed = try changer.confirmLastAttempt(context) } catch { throw mapInteraction(error) }
        guard lastAttemptConfirmed else { throw .cancelled }
      }
      do {
        let outcome = try session.transact { () throws(TokenError) -> Bool in
          // Tries may have been spent by another program since the prompt: read them again first.
          let now = try session.pinStatus(kind)
          if now.isBlocked { throw .pinBlocked(kind) }
          if now.retriesLeft == 1 && !lastAttemptConfirmed { return false }
          switch operation {
          case .changePIN, .changePUK:
            try session.changeReference(kind, old: answer.current.bytes, new: answer.new.bytes)
          case .unblockPIN:
            try session.unblockPIN(puk: answer.current.bytes, newPIN: answer.new.bytes)
          case .setPIN:
            throw .unsupported("setting a first PIN (a PIV card always has one: use pin change)")
          }
          return true
        }
        if outcome { return }
        context.lastRecoverableError = nil
        lastError = nil
      } catch .wrongPIN(_, let left) {
        lastError = .wrongCurrent(retriesLeft: left)
        lastAttemptConfirmed = false
        known = PINStatus(kind: kind, retriesLeft: left, maxRetries: status.maxRetries, isDefault: status.isDefault)
      } catch .pinBlocked(let k) {
        throw .blocked(k, token: token.info)
      } catch .pinFormat(_, let problem) {
        lastError = .invalidCurrent(reason: problem.phrase)
      } catch {
        throw .token(error)
      }
    }
  }

  func read(_ session: PIVSession, _ kind: PINKind) throws(OperationError) -> PINStatus {
    do { return try session.pinStatus(kind) } catch { throw .token(error) }
  }
}

extension Optional where Wrapped == PinChangeRecoverableError {
  var isWrongCurrent: Bool {
    if case .wrongCurrent = self { return true }
    return false
  }
}
