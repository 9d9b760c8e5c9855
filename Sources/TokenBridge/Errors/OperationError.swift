import Platform
import TokenDevices
import UAFCore

/// Why an operation of the client library stopped. Messages for people are made in the CLI.
public enum OperationError: Error, Equatable, Sendable {
  /// The user cancelled (or said no to the last attempt).
  case cancelled
  /// The user did not answer within the interaction timeout.
  case timedOut
  /// The secret is blocked; nothing was sent.
  case blocked(PINKind, token: TokenInfo)
  /// No usable token: how many readers, which were empty, which held something else.
  case noToken(readers: Int, emptyReaders: [String], unusable: [String])
  /// `--token ID` named a token that is not there.
  case tokenNotFound(String, available: [TokenInfo])
  /// Several tokens and nobody to choose one.
  case ambiguous([TokenInfo])
  /// The slot already holds a key and overwriting was not confirmed.
  case slotOccupied(PIVSlot)
  /// The device layer failed.
  case token(TokenError)
  /// Local data could not be read or written.
  case localData(LocalDataError)
  /// Every slot this client may use on the token is taken.
  case noFreeSlot(String)
  /// Configuration is missing or wrong.
  case configuration(ConfigurationError)
  /// The server refused or failed.
  case backend(BackendError)
  /// The UAF message could not be used.
  case message(UAFMessageError)
  /// The appID's trusted facets do not include us (UNTRUSTED_FACET_ID).
  case facet(FacetCheckError)
  /// No authenticator here fits the server's policy; per authenticator (or token), why not.
  case noSuitableAuthenticator([String: [String]])
  /// The transaction cannot be shown (e.g. an image).
  case transaction(TransactionContent.Problem)
  /// Several accounts fit and nobody to choose one.
  case ambiguousAccount([AuthenticatorRecord])
  /// Several authenticators (registration) or accounts (`accounts`: username-less authentication) could serve
  /// and nobody to choose: every one listed, usable or not, with the reasons.
  case choiceNeeded(accounts: Bool, [SelectionCandidate])
  /// No local registration for that account/server.
  case notRegistered(String)
  /// The input a script gave (or the lack of a terminal) stopped the flow.
  case input(InputError)
  /// A PIN flow ended on a recoverable refusal and there was no more input to try again (`--pin-fd`):
  /// the refusal itself (wrong with tries left, or a value refused before it was sent).
  case pinRefused(PinRecoverableError, token: TokenInfo)
  /// The server's request names another user than the one asked for.
  case usernameMismatch(asked: String, got: String)
  /// An out-of-band payload or its token could not be used.
  case outOfBand(OutOfBandError)
  /// The dispatch-target or device service failed (device change/check/sync, pending operations).
  case device(DeviceServiceError)
  /// A destructive operation (FIDO2 reset, credential deletion) was not confirmed as asked (the key id not
  /// typed in full); nothing was changed.
  case declined
  /// The FIDO2 key that came back after the replug is not the one chosen for the reset (`token`): another
  /// AAGUID, or (same AAGUID) it does not know the chosen key's credentials. Nothing was reset.
  case differentKey(token: String, expectedAAGUID: String, foundAAGUID: String)
  /// Plug-in enrollment could not start (`tokenbridge enroll`).
  case enrollment(EnrollmentError)
  /// `tokenbridge provision` stopped (before touching a token, or for one row).
  case provision(ProvisionError)
  /// An error of a kind no layer declared (a bug); carries its type name only.
  case unexpected(String)
}

extension OperationError {
  /// Loads libcrypto before an operation that hashes, signs or agrees on a key (Sources/SystemCrypto), so a missing
  /// library is this error, with its Debian package, and never an abort halfway through.
  static func needCrypto() throws(OperationError) {
    do { try SystemLibrary.crypto.load() } catch { throw .token(.libraryMissing(error)) }
  }
}
