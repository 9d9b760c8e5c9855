import DBus
import FoundationEssentials
import Platform
import Prompts
import TokenBridge

/// What a request object runs: a UAF message or an out-of-band payload, under a facet, for an app.
public struct RequestWork: Sendable, Equatable {
  public enum Kind: Sendable, Equatable {
    /// processUAFOperation: the message and the channel bindings (`""`: none).
    case uaf(message: String, channelBinding: String)
    /// ProcessOutOfBand: `qr`, `link` or `push`, and the payload.
    case outOfBand(kind: String, payload: String)
  }
  public var kind: Kind
  /// The facet the operation runs under (the caller's, or the web origin it may pass).
  public var facet: String
  /// The caller's own facet ID (named in the dialogs).
  public var app: String
  /// Only this token (`options["token"]`).
  public var token: String?
}

/// A request's `Response`: 0 success, 1 cancelled, 2 other failure, and its results (docs/dbus-api.md).
public struct RequestOutcome: Sendable, Equatable {
  public var response: UInt32
  public var results: [DBusValue.DictEntry]
  public init(response: UInt32, results: [DBusValue.DictEntry]) {
    self.response = response
    self.results = results
  }
}

/// The operations behind request objects, with the request's pinentry prompts.
extension ServiceWork {
  /// The pinentry of one request (the configuration's program, else `$PINENTRY_PROGRAM`), ended by its Close, and
  /// the lines its dialogs add: the calling app and the server.
  static func pinentry(_ c: Context, control: RequestControl) -> Pinentry {
    let named = Environment.value("PINENTRY_PROGRAM").flatMap { $0.isEmpty ? nil : $0 }
    let pinentry = Pinentry(
      program: c.configuration.pinentry ?? named ?? "pinentry", timeout: c.configuration.interactionTimeout,
      lcCtype: Environment.value("LC_ALL") ?? Environment.value("LC_CTYPE") ?? Environment.value("LANG"))
    control.attach(pinentry.cancellation)
    return pinentry
  }

  static func dialogContext(app: String, server: String?) -> [String] {
    ["App: \(displayable(app))"] + (server.map { ["Server: \(displayable($0))"] } ?? [])
  }

  /// What a request answers once its registration is settled: `keep` the registration is confirmed locally (the
  /// answer goes out), else abandoned (the request was cancelled first); nil, or why it could not be.
  static func settleRegistration(_ c: Context, keyID: String, keep: Bool) -> String? {
    do {
      let env = try UAFEnvironment(configuration: c.configuration)
      if keep { try env.confirmRegistration(keyID) } else { try env.abandonRegistration(keyID) }
      return nil
    } catch { return ErrorReport(error).message }
  }

  static func outcome(_ error: Error, cancelled: Bool) -> RequestOutcome {
    let report = ErrorReport(error)
    let code = cancelled ? UAFErrorCode.userCancelled : UAFErrorCode(error)
    let status = cancelled ? ExitStatus.cancelled.rawValue : report.status.rawValue
    return RequestOutcome(
      response: code == .userCancelled ? 1 : 2,
      results: [
        .init("errorCode", .uint32(code.rawValue)), .init("error", .string(cancelled ? "Cancelled." : report.message)),
        .init("exitStatus", .uint32(UInt32(status))),
      ])
  }

  /// processUAFOperation: `UAFEnvironment.processUAFOperation`, what `uaf process` runs.
  static func processUAF(
    _ c: Context, _ work: RequestWork, message: String, channelBinding: String, verifiers: RequestVerifierFactory,
    control: RequestControl, outbox: Outbox
  ) -> RequestOutcome {
    let server = ServiceSupport.appIDOrigin(message)
    let pinentry = pinentry(c, control: control)
    let lines = dialogContext(app: work.app, server: server ?? work.facet)
    let verifier = verifiers(pinentry, lines)
    let choice = PinentryChoice(pinentry: pinentry, dialogContext: lines)
    let app = displayable(work.app)
    do {
      if control.isCancelled { throw OperationError.cancelled }
      // A message breaking a rule is refused before any token is listed or a dialog shown.
      try UAFEnvironment.validateRequest(Array(message.utf8))
      let env = try UAFEnvironment(configuration: c.configuration)
      let tokens = try env.tokens(id: work.token, trace: nil) { info in
        outbox.post(.notify(summary: "Touch your key", body: "Touch your key (\(info.id)) for \(app)."))
      }
      control.attach(tokens.cancellers)
      outbox.post(work.token == nil ? .seen(tokens.infos) : .seenSome(tokens.infos))
      // A registration stays pending until its answer is sent (`settleRegistration`): a request cancelled before
      // that (Close, the caller gone) keeps nothing locally that the server never got.
      let (envelope, keyID) = try env.processUAFOperation(
        input: Array(message.utf8), facetID: work.facet,
        channelBinding: channelBinding.isEmpty ? nil : channelBinding, tokens: tokens, verifier: verifier,
        accountSelector: choice, authenticatorSelector: choice, confirm: false)
      if control.isCancelled {
        if let keyID { try env.abandonRegistration(keyID) }
        throw OperationError.cancelled
      }
      outbox.post(.notify(summary: "TokenBridge", body: "Done for \(app)."))
      var results: [DBusValue.DictEntry] = [
        .init("message", .string(envelope)), .init("errorCode", .uint32(0)), .init("exitStatus", .uint32(0)),
      ]
      if let keyID { results.append(.init("registeredKeyID", .string(keyID))) }
      return RequestOutcome(response: 0, results: results)
    } catch {
      if !control.isCancelled {
        outbox.post(.notify(summary: "TokenBridge: failed", body: ErrorReport(error).message))
      }
      return outcome(error, cancelled: control.isCancelled)
    }
  }

  /// An out-of-band payload: decoded and run as `tokenbridge oob` runs it (the user confirms first).
  static func processOutOfBand(
    _ c: Context, _ work: RequestWork, kind: String, payload: String, verifiers: RequestVerifierFactory,
    control: RequestControl, outbox: Outbox
  ) -> RequestOutcome {
    do {
      let env = try UAFEnvironment(configuration: c.configuration)
      let source: OutOfBandSource =
        switch kind {
        case "qr": .qrText(payload)
        case "link": .link(payload)
        default: .push(Array(payload.utf8))
        }
      let payload = try env.outOfBandPayload(source)
      let pinentry = pinentry(c, control: control)
      var lines = dialogContext(app: work.app, server: payload.serverOrigin)
      if let data = payload.data { lines.append("The request says: \(displayable(data))") }
      let verifier = verifiers(pinentry, lines)
      guard try verifier.confirm(.outOfBand(payload.operation, server: payload.serverOrigin)) else {
        throw OperationError.cancelled
      }
      let tokens = try env.tokens(id: work.token, trace: nil) { info in
        outbox.post(.notify(summary: "Touch your key", body: "Touch your key (\(info.id))."))
      }
      control.attach(tokens.cancellers)
      outbox.post(work.token == nil ? .seen(tokens.infos) : .seenSome(tokens.infos))
      let choice = PinentryChoice(pinentry: pinentry, dialogContext: lines)
      let result = try env.redeem(
        payload, facetID: work.facet, tokens: tokens, authenticatorSelector: choice, verifier: verifier,
        accountSelector: choice)
      if control.isCancelled { throw OperationError.cancelled }
      return RequestOutcome(
        response: 0,
        results: [
          .init("operation", .string(result.op.rawValue)), .init("server", .string(payload.serverOrigin)),
          .init("errorCode", .uint32(0)), .init("exitStatus", .uint32(0)),
        ])
    } catch {
      return outcome(error, cancelled: control.isCancelled)
    }
  }
}
