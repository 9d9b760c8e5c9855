import TokenDevices
import UAFCore

/// A failure the user can correct by entering the PIN again.
public enum PinVerificationRecoverableError: Equatable, Sendable {
  case wrongPin(retriesLeft: Int)
  case invalidPin(reason: String)
}

/// What a PIN verifier is told before it asks (the SDKs' PinUserVerificationContext).
public struct PinVerificationContext: Sendable {
  public var token: TokenInfo
  public var protection: ProtectionStatus
  public var status: PINStatus
  public var lastRecoverableError: PinVerificationRecoverableError?
  /// Text the user confirms with the PIN (transaction confirmation), already stripped of control sequences.
  public var transactionText: String?
  /// What the PIN is for, in a few words ("sign with slot 9A").
  public var purpose: String
}

/// Asks the user for the PIN (the SDKs' PinUserVerifier).
public protocol PinUserVerifier {
  func providePin(_ context: PinVerificationContext) throws -> Secret
  /// The next attempt is the last before the PIN blocks: warn, and return true only on an explicit yes.
  func confirmLastAttempt(_ context: PinVerificationContext) throws -> Bool
}

/// Verifies the PIN with retries shown and the last attempt confirmed, then runs `body` in the same
/// transaction as the successful VERIFY (so nothing can come between them).
public struct PinVerification {
  public var purpose: String
  public var transactionText: String?

  public init(purpose: String, transactionText: String? = nil) {
    self.purpose = purpose
    self.transactionText = transactionText
  }

  public func run<T>(
    on token: DiscoveredToken, verifier: PinUserVerifier, _ body: (Secret) throws(TokenError) -> T
  ) throws(OperationError) -> T {
    let session = token.session
    var lastError: PinVerificationRecoverableError?
    var confirmed = false
    // Discovery read the tries a moment ago, and a wrong PIN reports them (63Cx): read only when unknown.
    var known = token.info.pin
    while true {
      let status: PINStatus
      if let known {
        status = known
      } else {
        do { status = try session.pinStatus(.pin) } catch { throw .token(error) }
      }
      known = nil
      if status.isBlocked { throw .blocked(.pin, token: token.info) }
      var failed = false
      if case .wrongPin = lastError { failed = true }
      let context = PinVerificationContext(
        token: token.info, protection: .from(retriesLeft: status.retriesLeft, lastAttemptFailed: failed),
        status: status, lastRecoverableError: lastError, transactionText: transactionText, purpose: purpose)
      let pin: Secret
      do { pin = try verifier.providePin(context) } catch { throw mapInteraction(error) }
      if pin.isEmpty || pin.bytes.count > 8 {
        lastError = .invalidPin(reason: pin.isEmpty ? "it is empty" : "it is longer than 8 characters")
        continue
      }
      if context.protection.isLastAttempt && !confirmed {
        do { confirmed = try verifier.confirmLastAttempt(context) } catch { throw mapInteraction(error) }
        guard confirmed else { throw .cancelled }
      }
      do {
        let result = try session.transact { () throws(TokenError) -> T? in
          let now = try session.pinStatus(.pin)
          if now.isBlocked { throw .pinBlocked(.pin) }
          if now.retriesLeft == 1 && !confirmed { return nil }
          try session.verifyPIN(pin.bytes)
          return try body(pin)
        }
        if let result { return result }
        lastError = nil
      } catch .wrongPIN(_, let left) {
        lastError = .wrongPin(retriesLeft: left)
        confirmed = false
        known = PINStatus(kind: .pin, retriesLeft: left, maxRetries: status.maxRetries)
      } catch .pinBlocked(let k) {
        throw .blocked(k, token: token.info)
      } catch .pinFormat(_, let problem) {
        lastError = .invalidPin(reason: problem.phrase)
      } catch {
        throw .token(error)
      }
    }
  }
}

extension PINFormatProblem {
  /// Why the value cannot be used, for `invalidPin`/`invalidCurrent` (the device layer gives facts only).
  var phrase: String {
    switch self {
    case .tooShort(let n): "it is shorter than \(n) characters"
    case .tooLong(let n): "it is longer than \(n) characters"
    case .refusedByToken: "the token refuses its format"
    }
  }
}
