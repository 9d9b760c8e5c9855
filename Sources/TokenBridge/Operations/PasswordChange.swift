import Foundation
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
/// (the SDKs' PasswordChange). The flow is the PIN change's: tries read first (no try spent), policy checked
/// before sending, last try confirmed, a wrong PIN recoverable. After 3 wrong PINs in a row the key refuses
/// every PIN until re-inserted: no PIN is sent then; the user is told, and the flow goes on when the same key is
/// back, or stops at the interaction timeout.
public struct PasswordChange {
  public var interactionTimeout: Double
  public var pollInterval: Double = 0.25

  public init(interactionTimeout: Double = 240) { self.interactionTimeout = interactionTimeout }

  /// `pin set`: a key without a PIN gets one.
  public func setPIN(on token: DiscoveredFIDO2, changer: PinChanger) throws(OperationError) {
    let info = try fido2Info(token)
    guard !info.pinIsSet else { throw .token(.unsupported("setting a PIN: this key has one (use pin change)")) }
    let policy = PasswordPolicy(minPINLength: info.minPINLength)
    var lastError: PinChangeRecoverableError?
    while true {
      let context = PinChangeContext(
        token: token.info, operation: .setPIN, policy: policy, protection: .unlocked(retriesLeft: nil),
        authorizingStatus: PINStatus(kind: .pin, retriesLeft: nil), lastRecoverableError: lastError)
      let answer: PinChangeAnswer
      do { answer = try changer.providePins(context) } catch { throw mapInteraction(error) }
      if let problem = policy.validate(new: answer.new.bytes, old: nil) {
        lastError = .invalidNew(problem)
        continue
      }
      do { try token.session.setPIN(normalized(answer.new), old: nil) } catch .pinFormat(_, let problem) {
        lastError = .invalidCurrent(reason: problem.phrase)
        continue
      } catch { throw .token(error) }
      return
    }
  }

  /// `pin change` on a FIDO2 key.
  public func changePIN(on token: DiscoveredFIDO2, changer: PinChanger, notifier: ReinsertionNotifier)
    throws(OperationError)
  {
    let info = try fido2Info(token)
    guard info.pinIsSet else { throw .token(.pinNotSet) }
    let policy = PasswordPolicy(minPINLength: info.minPINLength)
    var lastError: PinChangeRecoverableError?
    var confirmed = false
    var known = token.info.pin  // read by discovery a moment ago; afterwards read before every attempt
    while true {
      let status: PINStatus
      if let k = known {
        status = k
      } else {
        do { status = try token.session.pinStatus() } catch { throw .token(error) }
      }
      known = nil
      if status.isBlocked { throw .blocked(.pin, token: token.info) }
      let context = PinChangeContext(
        token: token.info, operation: .changePIN, policy: policy,
        protection: .from(retriesLeft: status.retriesLeft, lastAttemptFailed: lastError.isWrongCurrent),
        authorizingStatus: status, lastRecoverableError: lastError)
      let answer: PinChangeAnswer
      do { answer = try changer.providePins(context) } catch { throw mapInteraction(error) }
      if let problem = policy.validate(new: answer.new.bytes, old: answer.current.bytes) {
        lastError = .invalidNew(problem)
        continue
      }
      guard !answer.current.isEmpty, answer.current.bytes.count <= PasswordPolicy.maxBytes,
        PasswordPolicy.normalized(answer.current.bytes) != nil
      else {
        lastError = .invalidCurrent(reason: "it is empty, longer than 63 bytes or not UTF-8")
        continue
      }
      if context.protection.isLastAttempt && !confirmed {
        do { confirmed = try changer.confirmLastAttempt(context) } catch { throw mapInteraction(error) }
        guard confirmed else { throw .cancelled }
      }
      do {
        try token.session.setPIN(normalized(answer.new), old: normalized(answer.current))
        return
      } catch .wrongPIN(_, let left) {
        lastError = .wrongCurrent(retriesLeft: left)
        confirmed = false
      } catch .needsReinsertion {
        try waitForReinsertion(token, notifier)
        lastError = nil
      } catch .pinBlocked {
        throw .blocked(.pin, token: token.info)
      } catch .pinFormat(_, let problem) {
        lastError = .invalidCurrent(reason: problem.phrase)
      } catch {
        throw .token(error)
      }
    }
  }

  /// Waits, sending no PIN, until the key has been unplugged and is back (its connection drops, then it
  /// opens again), or the interaction timeout passes.
  func waitForReinsertion(_ token: DiscoveredFIDO2, _ notifier: ReinsertionNotifier) throws(OperationError) {
    notifier.reinsertionNeeded(token.info)
    let deadline = Date().addingTimeInterval(interactionTimeout)
    var gone = false
    while Date() < deadline {
      if !gone {
        // getPINRetries sends no PIN; it fails once the key is gone.
        if (try? token.session.pinRetries()) == nil { gone = true }
      }
      if gone, (try? token.session.reopen()) != nil {
        notifier.reinserted(token.info)
        return
      }
      Thread.sleep(forTimeInterval: pollInterval)
    }
    throw .timedOut
  }

  /// getInfo as discovery read it a moment ago (read again only if missing).
  func fido2Info(_ token: DiscoveredFIDO2) throws(OperationError) -> FIDO2Info {
    if let info = token.info.fido2 { return info }
    do { return try token.session.info() } catch { throw .token(error) }
  }

  func normalized(_ s: Secret) -> String {
    String(decoding: PasswordPolicy.normalized(s.bytes) ?? s.bytes, as: UTF8.self)
  }
}
