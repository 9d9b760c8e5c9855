import TokenBridge

/// What one request asks the person through its pinentry: the PIN (with the transaction text and the calling app
/// and server), the warning before a last try, the confirmation of an out-of-band operation. The service builds the
/// pinentry and ends it on cancel; `Prompter.requestVerifier` asks through it as the CLI's prompts do.
public protocol RequestVerifier: PinUserVerifier {
  func confirm(_ about: Confirmation) throws -> Bool
}

/// Makes the verifier of one request from its pinentry and the lines each of its dialogs shows after its own.
public typealias RequestVerifierFactory =
  @Sendable (_ pinentry: Pinentry, _ dialogContext: [String]) ->
  any RequestVerifier

extension Prompter: RequestVerifier {
  /// A request's prompts in the service: the CLI's prompter, pinentry only (the service has no terminal).
  @Sendable package static func requestVerifier(_ pinentry: Pinentry, _ dialogContext: [String]) -> any RequestVerifier
  {
    let prompter = Prompter(pinentry: pinentry)
    prompter.dialogContext = dialogContext
    return prompter
  }
}
