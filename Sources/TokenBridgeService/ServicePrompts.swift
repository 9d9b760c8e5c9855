import TokenBridge

/// What one request asks the person through its pinentry: the PIN (with the transaction text and the calling app
/// and server), the warning before a last try, the confirmation of an out-of-band operation. A front end supplies
/// it (`tokenbridge serve`: the CLI's pinentry prompter); the service builds the pinentry and ends it on cancel.
public protocol RequestVerifier: PinUserVerifier {
  func confirm(_ about: Confirmation) throws -> Bool
}

/// Makes the verifier of one request from its pinentry and the lines each of its dialogs shows after its own.
public typealias RequestVerifierFactory =
  @Sendable (_ pinentry: Pinentry, _ dialogContext: [String]) ->
  any RequestVerifier
