import TokenDevices
import UAFCore

/// Why an operation of the client library stopped. Messages for people are made in the CLI.
public enum OperationError: Error, Sendable {
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
  /// No local registration for that account/server.
  case notRegistered(String)
  /// The interaction gave up with an error of its own (e.g. no more lines on --pin-fd); kept as thrown.
  case interaction(any Error)
}
