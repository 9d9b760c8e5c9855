import Platform
import TokenDevices
import UAFCore

/// The PIN side of provisioning: what a token's PIN is now (factory default, unset, or its own), a fresh random PIN
/// that meets the token's policy, and setting it through the one PIN-attempt engine.
enum ProvisionPIN {
  /// The PIV factory PIN (SP 800-73-4 leaves it to the issuer; YubiKeys and our virtual card ship 123456).
  static let pivDefault: [UInt8] = Array("123456".utf8)

  enum State: Equatable {
    /// PIV 123456, or a FIDO2 key without a PIN: a fresh one is set.
    case factory
    /// The token has a PIN of its own: `--pin-fd` gives it.
    case own
  }

  /// What the PIN of `token` is. FIDO2: getInfo's clientPin option. PIV: GET METADATA's default flag (tag 05, as ykman
  /// reads it); a card without GET METADATA is asked with a VERIFY of 123456, and only while it has 3 or more tries
  /// left, so a wrong guess never brings it near its last try (and the right PIN's VERIFY resets the counter). With
  /// fewer tries the PIN counts as the token's own (`--pin-fd`).
  static func state(of token: AnyToken) throws(OperationError) -> State {
    switch token {
    case .fido2(let key):
      guard let info = key.info.fido2 else { return .own }
      return info.pinIsSet ? .own : .factory
    case .piv(let card):
      do throws(TokenError) {
        let status = try card.session.pinStatus(.pin, detailed: true)
        if status.isBlocked { throw .pinBlocked(.pin) }
        if let isDefault = status.isDefault { return isDefault ? .factory : .own }
        guard let left = status.retriesLeft, left >= 3 else { return .own }
        do {
          try card.session.verifyPIN(pivDefault)
          return .factory
        } catch .wrongPIN { return .own }
      } catch { throw .token(error) }
    }
  }

  /// A fresh PIN for `token`: decimal digits (every PIN pad and every policy takes them), 8 for a PIV card (its
  /// longest, SP 800-73-4 Part 2 §2.4.3), for a FIDO2 key 8 or its minPINLength if longer; drawn from the system's
  /// CSPRNG, never all one digit or a run (a YubiKey with PIN complexity refuses those), and checked against the
  /// policy the token's own PIN flow applies.
  static func fresh(for token: TokenInfo) -> [UInt8] {
    let length: Int
    let policy: any CredentialPolicy
    if token.kind == .fido2 {
      let minimum = token.fido2?.minPINLength ?? 4
      length = min(63, max(8, minimum))
      policy = PasswordPolicy(minPINLength: minimum)
    } else {
      length = PIVSession.referenceDataLength.upperBound
      policy = PinPolicy.pivPIN
    }
    var random = SystemRandomNumberGenerator()
    while true {
      var pin = (0..<length).map { _ in UInt8(ascii: "0") + UInt8.random(in: 0...9, using: &random) }
      let steps = Set(zip(pin, pin.dropFirst()).map { Int($1) - Int($0) })
      if Set(pin).count >= 4 && steps.count > 1 && policy.validate(new: pin, old: nil) == nil { return pin }
      wipe(&pin)
    }
  }

  /// Sets `new` on the token: a PIV card's PIN changed from 123456, a FIDO2 key's first PIN; through the PIN-attempt
  /// engine (tries read, policy, never the last try).
  static func set(_ new: [UInt8], on token: AnyToken, timeout: Double) throws(OperationError) {
    let changer = ScriptedPins(current: token.info.kind == .piv ? pivDefault : [], new: new)
    switch token {
    case .piv(let card): try PinChange(operation: .changePIN).run(on: card, changer: changer)
    case .fido2(let key): try PasswordChange(interactionTimeout: timeout).setPIN(on: key, changer: changer)
    }
  }

  /// Asks a FIDO2 key that takes authenticatorConfig's setMinPINLength to refuse `pin` until it is changed
  /// (forcePINChange, CTAP 2.1 §6.11.4), through the PIN-attempt engine (tries read first, none sent in a cool-down,
  /// never the last try). False when the key cannot be asked; true when it refuses the PIN now (already so: a killed
  /// run's request was taken).
  static func forceChange(_ pin: [UInt8], on key: DiscoveredFIDO2) throws(OperationError) -> Bool {
    let info: FIDO2Info
    do { info = try key.session.info() } catch { throw .token(error) }
    guard FIDO2Session.canForcePINChange(info) else { return false }
    if info.forcePINChange { return true }
    let engine = PinAttempts(
      token: key.info, kind: .pin, known: nil, readStatus: { () throws(TokenError) in try key.session.pinStatus() },
      coolingDown: { key.session.powerCycleRequired })
    return try engine.run(
      ask: { round in
        // Asked once: a second round means the key refused the PIN the run set a moment ago.
        guard round.lastError == nil else { throw InputError.noMoreInput(expected: .pin) }
        return Secret(pin)
      },
      check: { _ in nil },
      confirmLast: { _ in false },
      attempt: { (answer, _) throws(TokenError) -> Bool? in
        try key.session.forcePINChange(pin: answer.bytes)
        return true
      })
  }
}

/// The PINs a provisioning run already knows, answered once: a second question means the token refused the first
/// answer (wrong PIN, a value its policy refuses), and there is nothing else to offer. The last try is never spent.
struct ScriptedPins: PinChanger, PinUserVerifier, ReinsertionNotifier {
  let current: [UInt8]
  let new: [UInt8]

  func providePins(_ context: PinChangeContext) throws -> PinChangeAnswer {
    guard context.lastRecoverableError == nil else { throw InputError.noMoreInput(expected: .newPIN) }
    return PinChangeAnswer(current: Secret(current), new: Secret(new))
  }
  func confirmLastAttempt(_ context: PinChangeContext) throws -> Bool { false }
  func providePin(_ context: PinVerificationContext) throws -> Secret {
    guard context.lastRecoverableError == nil else { throw InputError.noMoreInput(expected: .pin) }
    return Secret(current)
  }
  func confirmLastAttempt(_ context: PinVerificationContext) throws -> Bool { false }
  func reinsertionNeeded(_ token: TokenInfo) {}
  func reinserted(_ token: TokenInfo) {}
}
