import Platform
import TokenDevices
import UAFCore

/// How an interaction ended without an answer.
public enum InteractionError: Error, Equatable, Sendable {
  case cancelled
  case timedOut
}

/// Why input a script gave (`--pin-fd`, `--management-key-fd`) or a missing terminal stopped a flow. Facts
/// only; the values themselves are never carried.
public enum InputError: Error, Equatable, Sendable {
  /// The descriptor ended before the expected value.
  case noMoreInput(expected: ExpectedInput)
  /// A line on the descriptor is longer than `limit` bytes (nothing of it is kept or shown).
  case lineTooLong(limit: Int)
  /// The descriptor could not be read (`errno`).
  case unreadable(fd: Int32, errno: Int32)
  /// Something must be asked and there is neither a terminal nor a descriptor.
  case noTerminal(expected: ExpectedInput)
  /// A confirmation is needed and there is no terminal to ask (and no --yes).
  case notConfirmed(Confirmation)
  /// `--channel-binding` is not a ChannelBinding JSON object.
  case badChannelBinding
  /// `--management-key-fd` did not hold a hex key.
  case badManagementKey
  /// A file named on the command line cannot be read or written (`errno`).
  case file(path: String, errno: Int32)
  /// A file named on the command line is a device, a FIFO or a socket: nothing was read from it.
  case notAFile(path: String)
  /// The pinentry program could not ask (nothing was sent to the token).
  case pinentry(PinentryError)
}

/// What a script was expected to provide.
public enum ExpectedInput: Equatable, Sendable {
  case pin
  case managementKey
  /// The current value of `current`, then the new value of `new` (PIN change: PIN, PIN; unblock: PUK, PIN).
  case currentAndNew(current: PINKind, new: PINKind)
  case newPIN
  case answer
}

/// What a confirmation was about.
public enum Confirmation: Equatable, Sendable {
  case lastAttempt(PINKind)
  case overwriteSlot(PIVSlot)
  case forgetLocally
  /// Run the operation an out-of-band payload names, at its server.
  case outOfBand(UAFOperation, server: String)
  /// Run a device-information sync that deletes this many items (listed before the question).
  case deviceSync(deletions: Int)
  /// Enroll a token that was just plugged in (`tokenbridge enroll`, onInsert: ask).
  case enroll(token: String, server: String, username: String)
}

/// A secret typed by the user (PIN, PUK, password): wiped when released. Not `Sendable`: one owner.
public final class Secret {
  public private(set) var bytes: [UInt8]
  public init(_ bytes: [UInt8]) { self.bytes = bytes }
  deinit { wipe(&bytes) }
  public var isEmpty: Bool { bytes.isEmpty }
  /// Changes the value in place (callers keep the buffer from reallocating: reserve first).
  package func mutate(_ change: (inout [UInt8]) -> Void) { change(&bytes) }
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

/// What a PIN changer is told before it asks (the SDKs' PinChangeContext).
public struct PinChangeContext: Sendable {
  public var token: TokenInfo
  public var operation: PinOperation
  public var policy: any CredentialPolicy
  /// State of the authorising secret (tries left), read without spending a try.
  public var protection: ProtectionStatus
  public var authorizingStatus: PINStatus
  public var lastRecoverableError: PinRecoverableError?
}

/// The current secret and the new one (already confirmed by the user).
public struct PinChangeAnswer {
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
