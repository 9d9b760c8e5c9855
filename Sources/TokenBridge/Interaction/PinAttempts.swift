import TokenDevices
import UAFCore

/// A failure the user can correct by answering again (the SDKs' "last recoverable error"). Every PIN flow, for
/// every token kind, reports its recoverable failures in this one shape.
public enum PinRecoverableError: Equatable, Sendable {
  /// The token refused the value; `retriesLeft` tries remain.
  case wrong(PINKind, retriesLeft: Int)
  /// The value cannot be right for this token (its format): nothing was sent, no try spent.
  case invalidCurrent(PINKind, PinValidationError)
  /// The new value breaks the policy: nothing was sent, no try spent.
  case invalidNew(PINKind, PinValidationError)

  public var isWrong: Bool {
    if case .wrong = self { return true }
    return false
  }
}

/// The one PIN-attempt engine (ARCHITECTURE.md, Errors): read the tries (free) → ask → check the value against
/// the token's format and the policy (a refused value costs no try) → confirm before the last try → attempt →
/// map the outcome (wrong with tries left, blocked, cool-down). User verification, PIN/PUK change, unblock,
/// password change and FIDO2 verification all run through `run`.
struct PinAttempts {
  let token: TokenInfo
  /// The secret whose tries an attempt spends.
  let kind: PINKind
  /// The state as read a moment ago in this command (discovery); nil: read it first.
  var known: PINStatus?
  /// Reads the state without spending a try.
  let readStatus: () throws(TokenError) -> PINStatus
  /// A token in cool-down (FIDO2 PIN_AUTH_BLOCKED) takes no PIN until re-inserted: wait for that, sending
  /// nothing. Nil: the cool-down ends the flow.
  var waitForReinsertion: (() throws(OperationError) -> Void)?
  /// Whether the token said, with the tries just read, that it is in a cool-down (a FIDO2 key's powerCycleState):
  /// then no PIN is asked until it was re-inserted. Nil: the token does not say.
  var coolingDown: (() -> Bool)?
  /// What a format refusal by the token itself means (PIV 6A80 on the current value; a FIDO2 key's
  /// PIN_POLICY_VIOLATION is about the new PIN).
  var formatRefusal: PinRecoverableError

  init(
    token: TokenInfo, kind: PINKind, known: PINStatus?, readStatus: @escaping () throws(TokenError) -> PINStatus,
    waitForReinsertion: (() throws(OperationError) -> Void)? = nil, formatRefusal: PinRecoverableError? = nil,
    coolingDown: (() -> Bool)? = nil
  ) {
    self.coolingDown = coolingDown
    self.formatRefusal = formatRefusal ?? .invalidCurrent(kind, .refusedByToken)
    self.token = token
    self.kind = kind
    self.known = known
    self.readStatus = readStatus
    self.waitForReinsertion = waitForReinsertion
  }

  /// What `ask` and `confirmLast` are told.
  struct Round {
    var status: PINStatus
    var protection: ProtectionStatus
    var lastError: PinRecoverableError?
  }

  /// Runs rounds until `attempt` returns a value. `attempt` gets the answer and whether the last try was
  /// confirmed; it returns nil when it found (re-reading inside its transaction) that the tries changed under
  /// it and the round must be asked again.
  func run<Answer, T>(
    ask: (Round) throws -> Answer,
    check: (Answer) -> PinRecoverableError?,
    confirmLast: (Round) throws -> Bool,
    attempt: (Answer, _ lastConfirmed: Bool) throws(TokenError) -> T?
  ) throws(OperationError) -> T {
    var known = self.known
    var lastError: PinRecoverableError?
    var confirmed = false
    while true {
      let status: PINStatus
      if let k = known {
        status = k
      } else {
        do { status = try readStatus() } catch { throw .token(error) }
      }
      known = nil
      if status.isBlocked { throw .blocked(kind, token: token) }
      // The key said with these tries that it takes no PIN until re-inserted: wait for that before asking one
      // (no PIN is sent in a cool-down, even one another process started); then the tries are read again.
      if coolingDown?() == true {
        guard let waitForReinsertion else { throw .token(.needsReinsertion) }
        try waitForReinsertion()
        lastError = nil
        confirmed = false
        continue
      }
      let round = Round(
        status: status,
        protection: .from(retriesLeft: status.retriesLeft, lastAttemptFailed: lastError?.isWrong ?? false),
        lastError: lastError)
      let answer: Answer
      do { answer = try ask(round) } catch InputError.noMoreInput where lastError != nil {
        // A script's input ran dry after a refusal: end with the refusal itself, not "no more input".
        throw .pinRefused(lastError!, token: token)
      } catch { throw mapInteraction(error) }
      if let problem = check(answer) {
        lastError = problem
        known = status  // nothing was sent: the tries are what they were
        continue
      }
      if round.protection.isLastAttempt && !confirmed {
        do { confirmed = try confirmLast(round) } catch { throw mapInteraction(error) }
        guard confirmed else { throw .cancelled }
      }
      do {
        if let result = try attempt(answer, confirmed) { return result }
        lastError = nil  // the tries changed under us: read them and ask again
        confirmed = false
      } catch .wrongPIN(let k, let left) {
        lastError = .wrong(k, retriesLeft: left)
        confirmed = false
        known = PINStatus(kind: k, retriesLeft: left, maxRetries: status.maxRetries, isDefault: status.isDefault)
      } catch .pinBlocked(let k) {
        throw .blocked(k, token: token)
      } catch .needsReinsertion {
        guard let waitForReinsertion else { throw .token(.needsReinsertion) }
        try waitForReinsertion()
        lastError = nil
        confirmed = false
      } catch .pinFormat(_, _) {
        lastError = formatRefusal
        known = status
      } catch {
        throw .token(error)
      }
    }
  }
}

/// What a token takes as a current PIN/PUK at all (checked before anything is sent).
enum TokenFormat {
  /// PIV reference data: any value of `PIVSession.referenceDataLength` bytes (SP 800-73-4 Part 2 §2.4.3 asks
  /// digits for new PINs; a YubiKey takes any byte, so a current PIN set elsewhere may hold others).
  /// HardwareNotes.md, PIV PIN format.
  static let pivReferenceData = PinPolicy(lengths: PIVSession.referenceDataLength, digitsOnly: false)
  /// A FIDO2 PIN: UTF-8, at least 4 code points after NFC, at most 63 bytes (CTAP 2.1 §6.5.1).
  static let fido2PIN = PasswordPolicy(minPINLength: 4)
}
