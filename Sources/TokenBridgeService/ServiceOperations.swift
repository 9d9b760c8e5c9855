import Prompts
import TokenBridge

/// The work behind each method, as the dispatcher hands it out (on a worker thread): the library's operations in
/// the service (`LibraryOperations`), a fake in the dispatcher's tests.
public protocol ServiceOperations: Sendable {
  func discover(_ c: ServiceWork.Context) -> Outbox.Outcome
  func listTokens(_ c: ServiceWork.Context, token: String?) -> Outbox.Outcome
  func checkPolicy(_ c: ServiceWork.Context, message: String, facet: String, token: String?) -> Outbox.Outcome
  func abandon(_ c: ServiceWork.Context, keyID: String) -> Outbox.Outcome
  /// A request object's operation; `control` says when it is cancelled, `outbox` takes notifications. A
  /// registration it answers (`registeredKeyID` in the results) stays pending until `settleRegistration`.
  func process(_ c: ServiceWork.Context, _ work: RequestWork, control: RequestControl, outbox: Outbox)
    -> RequestOutcome
  /// Confirms (`keep`) or abandons a registration a request answered, as its Response goes out (or is cancelled);
  /// nil, or why it could not be done.
  func settleRegistration(_ c: ServiceWork.Context, keyID: String, keep: Bool) -> String?
}

/// The library's operations: what `uaf discover`, `tokens`, `uaf process` and `oob` run, prompts through the
/// front end's verifier.
public struct LibraryOperations: ServiceOperations {
  let verifiers: RequestVerifierFactory

  public init(verifiers: @escaping RequestVerifierFactory) { self.verifiers = verifiers }

  public func discover(_ c: ServiceWork.Context) -> Outbox.Outcome { ServiceWork.discover(c) }

  public func listTokens(_ c: ServiceWork.Context, token: String?) -> Outbox.Outcome {
    ServiceWork.listTokens(c, token: token)
  }

  public func checkPolicy(_ c: ServiceWork.Context, message: String, facet: String, token: String?)
    -> Outbox.Outcome
  {
    ServiceWork.checkPolicy(c, message: message, facet: facet, token: token)
  }

  public func abandon(_ c: ServiceWork.Context, keyID: String) -> Outbox.Outcome {
    ServiceWork.abandon(c, keyID: keyID)
  }

  public func settleRegistration(_ c: ServiceWork.Context, keyID: String, keep: Bool) -> String? {
    ServiceWork.settleRegistration(c, keyID: keyID, keep: keep)
  }

  public func process(_ c: ServiceWork.Context, _ work: RequestWork, control: RequestControl, outbox: Outbox)
    -> RequestOutcome
  {
    switch work.kind {
    case .uaf(let message, let channelBinding):
      ServiceWork.processUAF(
        c, work, message: message, channelBinding: channelBinding, verifiers: verifiers, control: control,
        outbox: outbox)
    case .outOfBand(let kind, let payload):
      ServiceWork.processOutOfBand(
        c, work, kind: kind, payload: payload, verifiers: verifiers, control: control, outbox: outbox)
    }
  }
}
