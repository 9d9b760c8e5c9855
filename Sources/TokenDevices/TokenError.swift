import Platform

/// Which secret a PIN failure is about.
public enum PINKind: String, Sendable, Equatable, Codable {
  case pin = "PIN"
  case puk = "PUK"
}

/// The device layer's one error type. PIN failures have one shape for every token kind
/// (ARCHITECTURE.md): wrong (with retries left), blocked, needs re-insertion, format.
public enum TokenError: Error, Equatable, Sendable {
  /// The transport failed (no pcscd, no reader, card removed, …).
  case smartCard(SmartCardError)
  /// The token refused the PIN/PUK; `retriesLeft` tries remain (0 means the next failure… none: it is blocked).
  case wrongPIN(PINKind, retriesLeft: Int)
  /// The PIN/PUK is blocked: no try left.
  case pinBlocked(PINKind)
  /// The token wants a power cycle before it takes another PIN (FIDO2 PIN_AUTH_BLOCKED).
  case needsReinsertion
  /// The token cannot take this value at all (e.g. a PIV PIN of 5 or 9 bytes); nothing was sent, no try spent
  /// (except `.refusedByToken`: the token itself refused the format, and said so without counting a try).
  case pinFormat(PINKind, PINFormatProblem)
  /// The card in `reader` has no PIV application (SELECT answered 6A82).
  case notPIV(reader: String)
  /// The management key was not accepted (mutual authentication failed).
  case managementKeyRejected
  /// The slot holds no key.
  case slotEmpty(UInt8)
  /// The FIDO2 key holds no credential for the request (CTAP2_ERR_NO_CREDENTIALS: another key, or it was reset).
  case noCredential(operation: String)
  /// The token accepted the request but did not answer within the session's deadline for `operation`
  /// (a stalled key or socket). Nothing is known about what the token did.
  case noAnswer(operation: String)
  /// The card wants a PIN or management key first (6982) for `operation`.
  case securityStatusNotSatisfied(operation: String)
  /// A status word we did not expect for `operation`.
  case unexpectedStatus(StatusWord, operation: String)
  /// The card's answer could not be parsed.
  case malformedResponse(operation: String)
  /// The token does not support `feature`.
  case unsupported(String)
  /// The FIDO2 key has no PIN yet (set one first).
  case pinNotSet
  /// The FIDO2 key wants its PIN changed before the PIN is used (getInfo forcePINChange).
  case pinChangeRequired
  /// The operation was cancelled while the key waited (Ctrl-C → CTAPHID_CANCEL).
  case cancelled
  /// Nobody touched the key in time.
  case touchTimeout
  /// The touch was refused on the key.
  case touchDenied
  /// The FIDO2 key refused a reset (CTAP2_ERR_NOT_ALLOWED): more than its reset window (10 s in CTAP 2.1
  /// §6.6) passed since it was powered up. Nothing was erased.
  case resetNotAllowed
  /// Any other libfido2 status (`fido_strerr` says what), for `operation`.
  case fido2(Int32, operation: String)
  /// A library the operation needs (libfido2, libcrypto) cannot be loaded; they are loaded at first use.
  case libraryMissing(LibraryUnavailable)
}

/// Why a PIN/PUK value cannot be used, as facts (the CLI words them).
public enum PINFormatProblem: Error, Equatable, Sendable {
  /// Fewer than `minimum` bytes.
  case tooShort(minimum: Int)
  /// More than `maximum` bytes.
  case tooLong(maximum: Int)
  /// The token refused the format with this status word (PIV 6A80/6700), or `nil` when libfido2 reported
  /// FIDO_ERR_PIN_POLICY_VIOLATION (the key's own PIN policy).
  case refusedByToken(StatusWord?)
}

/// What a token says about one PIN (or PUK), read without spending a try.
public struct PINStatus: Sendable, Equatable, Codable {
  public var kind: PINKind
  /// Tries left; `nil` when the token does not tell (e.g. a PUK on a card without metadata).
  public var retriesLeft: Int?
  /// Total tries; `nil` when unknown.
  public var maxRetries: Int?
  /// Still the manufacturer default (known on YubiKey-compatible cards only).
  public var isDefault: Bool?
  /// The PIN is verified in this session already (empty VERIFY answered 9000).
  public var isVerified: Bool
  /// A FIDO2 key in its cool-down: it takes no PIN until it is removed and re-inserted (getPINRetries'
  /// powerCycleState, CTAP 2.1 §6.5.5.3: set after three wrong PINs in a row, by any program). nil: not told.
  public var powerCycleRequired: Bool?

  public init(
    kind: PINKind, retriesLeft: Int?, maxRetries: Int? = nil, isDefault: Bool? = nil, isVerified: Bool = false,
    powerCycleRequired: Bool? = nil
  ) {
    self.kind = kind
    self.retriesLeft = retriesLeft
    self.maxRetries = maxRetries
    self.isDefault = isDefault
    self.isVerified = isVerified
    self.powerCycleRequired = powerCycleRequired
  }

  public var isBlocked: Bool { retriesLeft == 0 }
}
