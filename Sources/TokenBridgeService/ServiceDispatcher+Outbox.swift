import DBus
import FoundationEssentials
import Platform
import TokenBridge

extension ServiceDispatcher {
  /// Turns what the workers handed back into replies, `Response` signals and notifications.
  public func drainOutbox() {
    for item in outbox.take() {
      lastActivity = .now
      switch item {
      case .reply(let id, let values):
        guard let call = pendingCalls.removeValue(forKey: id)?.call else { continue }
        reply(call, values)
      case .error(let id, let name, let code, let text):
        guard let call = pendingCalls.removeValue(forKey: id)?.call else { continue }
        replyError(call, name, code, text)
      case .response(let path, let outcome):
        sendResponse(path, outcome)
      case .notify(let summary, let body):
        notify(summary, body)
      case .seen(let infos):
        seen = infos
      case .seenSome(let infos):
        let ids = Set(infos.map(\.id))
        seen = seen.filter { !ids.contains($0.id) } + infos
      }
    }
  }

  /// The request's `Response`, to its caller only; the request and its busy tokens are gone after it. A
  /// registration it answers is confirmed locally here, on the thread that handles Close and callers leaving, so
  /// it is kept exactly when the answer goes out: a request cancelled first gets Cancelled and keeps nothing.
  func sendResponse(_ path: String, _ answer: RequestOutcome) {
    guard let request = requests.removeValue(forKey: path) else { return }
    busy = busy.filter { $0.value != path }
    var outcome = answer
    if case .string(let keyID)? = outcome.results.first(where: { $0.key == "registeredKeyID" })?.value {
      var keep = !request.control.isCancelled
      // A caller that left while the token finished may not be known to have left yet (its NameOwnerChanged still
      // unread): the bus daemon is asked (GetConnectionCredentials, one round trip), so a registration is kept
      // only for a caller still there to receive its answer. Found by the service's kill sweep: a caller killed
      // while the card made the registration's last signature got a kept registration the server never saw.
      if keep, (try? bus.credentials(of: request.sender)) == nil {
        request.control.cancel()
        keep = false
      }
      let failure = operations.settleRegistration(snapshot(), keyID: keyID, keep: keep)
      if !keep {
        outcome = ServiceWork.outcome(OperationError.cancelled, cancelled: true)
      } else if let failure {
        _ = operations.settleRegistration(snapshot(), keyID: keyID, keep: false)
        outcome = RequestOutcome(
          response: 2,
          results: [
            .init("errorCode", .uint32(UAFErrorCode.unknown.rawValue)), .init("error", .string(failure)),
            .init("exitStatus", .uint32(UInt32(ExitStatus.localData.rawValue))),
          ])
      }
    }
    let results = outcome.results
    if case .string(let message)? = results.first(where: { $0.key == "message" })?.value,
      case .string(let keyID)? = results.first(where: { $0.key == "registeredKeyID" })?.value
    {
      answered[message] = (request.sender, keyID)
      if let inner = UAFEnvelope.message(message) { answered[inner] = (request.sender, keyID) }
    }
    let shown = results.filter { $0.key != "registeredKeyID" }
    do {
      try bus.signal(
        path: path, interface: Self.requestInterface, member: "Response", destination: request.sender,
        [.uint32(outcome.response), .dict(shown)])
    } catch {
      FileIO.writeError("tokenbridge serve: the Response of \(path) could not be sent: \(error)\n")
    }
  }
}
