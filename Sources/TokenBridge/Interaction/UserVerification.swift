import TokenDevices
import UAFCore

/// What a PIN verifier is told before it asks (the SDKs' PinUserVerificationContext).
public struct PinVerificationContext: Sendable {
  public var token: TokenInfo
  public var protection: ProtectionStatus
  public var status: PINStatus
  public var lastRecoverableError: PinRecoverableError?
  /// Text the user confirms with the PIN (transaction confirmation), already made displayable
  /// (`UntrustedText`): control and bidi characters shown as escapes.
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

/// Verifies the PIV PIN through the PIN-attempt engine, then runs `body` in the same transaction as the
/// successful VERIFY (so nothing can come between them). Inside that transaction the tries are read again
/// first: another program may have spent some since the prompt.
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
    let detailed = token.detailed
    let engine = PinAttempts(
      token: token.info, kind: .pin, known: token.info.pin,
      readStatus: { () throws(TokenError) in
        try session.pinStatus(.pin, detailed: detailed)
      })
    return try engine.run(
      ask: { round in try verifier.providePin(context(token.info, round)) },
      check: { pin in TokenFormat.pivReferenceData.validate(new: pin.bytes).map { .invalidCurrent(.pin, $0) } },
      confirmLast: { round in try verifier.confirmLastAttempt(context(token.info, round)) },
      attempt: { (pin, confirmed) throws(TokenError) -> T? in
        try session.transact { () throws(TokenError) -> T? in
          let now = try session.pinStatus(.pin, detailed: false)  // the tries are all this check needs
          if now.isBlocked { throw .pinBlocked(.pin) }
          if now.retriesLeft == 1 && !confirmed { return nil }
          try session.verifyPIN(pin.bytes)
          return try body(pin)
        }
      })
  }

  func context(_ token: TokenInfo, _ round: PinAttempts.Round) -> PinVerificationContext {
    PinVerificationContext(
      token: token, protection: round.protection, status: round.status, lastRecoverableError: round.lastError,
      transactionText: transactionText, purpose: purpose)
  }
}
