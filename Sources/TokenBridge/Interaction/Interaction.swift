import TokenDevices
import UAFCore

/// How an interaction ended without an answer.
public enum InteractionError: Error, Equatable, Sendable {
  case cancelled
  case timedOut
}

/// A secret typed by the user (PIN, PUK, password): wiped when released.
public final class Secret: @unchecked Sendable {
  public private(set) var bytes: [UInt8]
  public init(_ bytes: [UInt8]) { self.bytes = bytes }
  deinit { wipe(&bytes) }
  public var isEmpty: Bool { bytes.isEmpty }
}

/// The operation a PIN changer is asked to help with.
public enum PinOperation: Sendable, Equatable {
  /// CHANGE REFERENCE DATA of the PIN (authorised by the current PIN).
  case changePIN
  /// CHANGE REFERENCE DATA of the PUK (authorised by the current PUK).
  case changePUK
  /// RESET RETRY COUNTER: a new PIN, authorised by the PUK.
  case unblockPIN
  /// A first PIN for a FIDO2 key (nothing authorises it).
  case setPIN

  /// The secret that authorises the operation (and whose tries it spends).
  public var authorizing: PINKind { self == .changePIN ? .pin : .puk }
  /// The secret that gets a new value.
  public var target: PINKind { self == .changePUK ? .puk : .pin }
}

/// A failure the user can correct by answering again.
public enum PinChangeRecoverableError: Equatable, Sendable {
  /// The new value breaks the policy: nothing was sent, no try spent.
  case invalidNew(PinValidationError)
  /// The current value cannot be right for this token (e.g. over 8 bytes): nothing was sent.
  case invalidCurrent(reason: String)
  /// The token refused the current value; `retriesLeft` remain.
  case wrongCurrent(retriesLeft: Int)
}

/// What a PIN changer is told before it asks (the SDKs' PinChangeContext).
public struct PinChangeContext: Sendable {
  public var token: TokenInfo
  public var operation: PinOperation
  public var policy: any CredentialPolicy
  /// State of the authorising secret (tries left), read without spending a try.
  public var protection: ProtectionStatus
  public var authorizingStatus: PINStatus
  public var lastRecoverableError: PinChangeRecoverableError?
}

/// The current secret and the new one (already confirmed by the user).
public struct PinChangeAnswer: Sendable {
  public var current: Secret
  public var new: Secret
  public init(current: Secret, new: Secret) {
    self.current = current
    self.new = new
  }
}

/// Asks the user for PINs (the SDKs' PinChanger). Implementations: terminal prompts, `--pin-fd`.
public protocol PinChanger {
  /// Asks for the current and the new value. Throws `InteractionError` to stop.
  func providePins(_ context: PinChangeContext) throws -> PinChangeAnswer
  /// The next attempt is the last before the secret blocks: warn, and return true only on an explicit yes.
  func confirmLastAttempt(_ context: PinChangeContext) throws -> Bool
}

/// Chooses one of several tokens (the SDKs' AuthenticatorSelector, for management commands).
public protocol TokenSelector {
  func selectToken(from tokens: [TokenInfo]) throws -> TokenInfo
}
