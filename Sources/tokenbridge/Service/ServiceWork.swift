import FoundationEssentials
import Platform
import TokenBridge

/// The service's methods as they run on their own threads: the library's operations, the same calls `uaf process`,
/// `oob` and `tokens` make (nothing here is a second implementation of a flow), with the outcome as D-Bus values.
enum ServiceWork {
  struct Context: Sendable {
    var configuration: Configuration
    /// Tokens an operation runs on now ("*": every token).
    var busyTokens: Set<String>
    /// The tokens the running operations found: while one runs, listings show these (asking the tokens would wait
    /// for the operation, which holds them).
    var seen: [TokenInfo]
  }

  static func failure(_ error: Error) -> Outbox.Outcome {
    let r = ErrorReport(error)
    return .failure(name: "Failed", code: UAFErrorCode(error), text: r.message)
  }

  /// The authenticators present, each with whether it can serve and why not (Discover, ListTokens).
  static func authenticators(_ c: Context, token: String?) throws -> [DBusValue] {
    let infos =
      c.busyTokens.isEmpty
      ? try TokenListing(trace: nil, id: token).tokens : c.seen.filter { token == nil || $0.id == token }
    return infos.flatMap(\.sides).map { t in
      let kind = t.kind.rawValue
      var reasons = ServiceSupport.hardwareReasons(t)
      if c.busyTokens.contains("*") || c.busyTokens.contains(t.id) {
        reasons.insert("busy: an operation is running on it", at: 0)
      }
      var d: [DBusValue.DictEntry] = [
        .init("aaid", .string(kind == "piv" ? c.configuration.pivAAID : c.configuration.fido2AAID)),
        .init("token", .string(t.id)), .init("kind", .string(kind)), .init("name", .string(displayable(t.name))),
        .init("usable", .bool(reasons.isEmpty)),
      ]
      if !reasons.isEmpty { d.append(.init("reason", .string(reasons.joined(separator: "; ")))) }
      return .dict(d)
    }
  }

  /// Discover: the Client API's DiscoveryData (docs/dbus-api.md, "Discover"), one Authenticator per token side
  /// present; what TokenBridge knows beyond it (token id, reader, usable and why not) is ListTokens'.
  static func discover(_ c: Context) -> Outbox.Outcome {
    let infos: [TokenInfo]
    do {
      infos = c.busyTokens.isEmpty ? try TokenListing(trace: nil).tokens : c.seen
    } catch { return failure(error) }
    let data = AuthenticatorProfile.discoveryData(infos, configuration: c.configuration)
    return .values([dbus(data)])
  }

  static func dbus(_ v: UAFVersion) -> DBusValue { .structure([.uint16(UInt16(v.major)), .uint16(UInt16(v.minor))]) }

  static func dbus(_ data: DiscoveryData) -> DBusValue {
    .dict([
      .init("supportedUAFVersions", .array(element: "(qq)", data.supportedUAFVersions.map(dbus))),
      .init("clientVendor", .string(data.clientVendor)), .init("clientVersion", dbus(data.clientVersion)),
      .init("availableAuthenticators", .array(element: "a{sv}", data.availableAuthenticators.map(dbus))),
    ])
  }

  static func dbus(_ a: DiscoveredAuthenticator) -> DBusValue {
    var d: [DBusValue.DictEntry] = [
      .init("title", .string(a.title)), .init("aaid", .string(a.aaid)), .init("description", .string(a.description)),
      .init("supportedUAFVersions", .array(element: "(qq)", a.supportedUAFVersions.map(dbus))),
      .init("assertionScheme", .string(a.assertionScheme)),
      .init("authenticationAlgorithm", .uint16(a.authenticationAlgorithm)),
      .init("attestationTypes", .array(element: "q", a.attestationTypes.map { .uint16($0) })),
      .init("userVerification", .uint32(a.userVerification)), .init("keyProtection", .uint16(a.keyProtection)),
      .init("matcherProtection", .uint16(a.matcherProtection)), .init("attachmentHint", .uint32(a.attachmentHint)),
      .init("isSecondFactorOnly", .bool(a.isSecondFactorOnly)), .init("tcDisplay", .uint16(a.tcDisplay)),
    ]
    if let t = a.tcDisplayContentType { d.append(.init("tcDisplayContentType", .string(t))) }
    d += [
      .init("icon", .string(a.icon)),
      .init("supportedExtensionIDs", .array(element: "s", a.supportedExtensionIDs.map { .string($0) })),
    ]
    return .dict(d)
  }

  static func listTokens(_ c: Context, token: String?) -> Outbox.Outcome {
    do { return .values([.array(element: "a{sv}", try authenticators(c, token: token))]) } catch {
      return failure(error)
    }
  }

  /// checkPolicy: always a UAF code (never an error reply), never a prompt.
  static func checkPolicy(_ c: Context, message: String, facet: String, token: String?) -> Outbox.Outcome {
    do {
      // A message breaking a rule is refused before any token is listed.
      try UAFEnvironment.validateRequest(Array(message.utf8))
      let env = try UAFEnvironment(configuration: c.configuration)
      let tokens = try env.tokens(id: token, trace: nil, details: false, fido2Info: true) { _ in }
      try env.checkPolicy(input: Array(message.utf8), facetID: facet, tokens: tokens)
      return .values([.uint32(UAFErrorCode.noError.rawValue)])
    } catch {
      return .values([.uint32(UAFErrorCode(error).rawValue)])
    }
  }

  static func abandon(_ c: Context, keyID: String) -> Outbox.Outcome {
    do {
      try UAFEnvironment(configuration: c.configuration).abandonRegistration(keyID)
      return .values([])
    } catch { return failure(error) }
  }

  /// The prompter of one request: pinentry only, its dialogs naming the app and the server.
  static func prompter(_ c: Context, control: RequestControl, app: String, server: String?) -> Prompter {
    let named = Environment.value("PINENTRY_PROGRAM").flatMap { $0.isEmpty ? nil : $0 }
    let pinentry = Pinentry(
      program: c.configuration.pinentry ?? named ?? "pinentry", timeout: c.configuration.interactionTimeout,
      lcCtype: Environment.value("LC_ALL") ?? Environment.value("LC_CTYPE") ?? Environment.value("LANG"))
    control.attach(pinentry.cancellation)
    let p = Prompter(pinentry: pinentry)
    p.dialogContext = ["App: \(displayable(app))"] + (server.map { ["Server: \(displayable($0))"] } ?? [])
    return p
  }

  static func results(_ error: Error, cancelled: Bool) -> (UInt32, [DBusValue.DictEntry]) {
    let r = ErrorReport(error)
    let code = cancelled ? UAFErrorCode.userCancelled : UAFErrorCode(error)
    return (
      code == .userCancelled ? 1 : 2,
      [
        .init("errorCode", .uint32(code.rawValue)), .init("error", .string(cancelled ? "Cancelled." : r.message)),
        .init("exitStatus", .uint32(UInt32(cancelled ? ExitStatus.cancelled.rawValue : r.status.rawValue))),
      ]
    )
  }

  /// processUAFOperation: `UAFEnvironment.processUAFOperation`, what `uaf process` runs.
  static func processUAF(
    _ c: Context, message: String, channelBinding: String, facet: String, app: String, token: String?,
    control: RequestControl, outbox: Outbox
  ) -> (UInt32, [DBusValue.DictEntry]) {
    let server = ServiceSupport.appIDOrigin(message)
    let prompter = prompter(c, control: control, app: app, server: server ?? facet)
    do {
      if control.isCancelled { throw OperationError.cancelled }
      // A message breaking a rule is refused before any token is listed or a dialog shown.
      try UAFEnvironment.validateRequest(Array(message.utf8))
      let env = try UAFEnvironment(configuration: c.configuration)
      let tokens = try env.tokens(id: token, trace: nil) { info in
        outbox.post(.notify(summary: "Touch your key", body: "Touch your key (\(info.id)) for \(displayable(app))."))
      }
      control.attach(tokens.cancellers)
      outbox.post(.seen(tokens.infos))
      let (envelope, keyID) = try env.processUAFOperation(
        input: Array(message.utf8), facetID: facet, channelBinding: channelBinding.isEmpty ? nil : channelBinding,
        tokens: tokens, verifier: prompter, accountSelector: PinentryChoice(prompter: prompter),
        authenticatorSelector: PinentryChoice(prompter: prompter))
      if control.isCancelled { throw OperationError.cancelled }
      outbox.post(.notify(summary: "TokenBridge", body: "Done for \(displayable(app))."))
      var results: [DBusValue.DictEntry] = [
        .init("message", .string(envelope)), .init("errorCode", .uint32(0)), .init("exitStatus", .uint32(0)),
      ]
      if let keyID { results.append(.init("registeredKeyID", .string(keyID))) }
      return (0, results)
    } catch {
      let out = results(error, cancelled: control.isCancelled)
      if !control.isCancelled {
        outbox.post(.notify(summary: "TokenBridge: failed", body: ErrorReport(error).message))
      }
      return out
    }
  }

  /// An out-of-band payload: decoded and run as `tokenbridge oob` runs it (the user confirms first).
  static func processOutOfBand(
    _ c: Context, kind: String, payload: String, facet: String, app: String, token: String?, control: RequestControl,
    outbox: Outbox
  ) -> (UInt32, [DBusValue.DictEntry]) {
    do {
      let env = try UAFEnvironment(configuration: c.configuration)
      let source: OutOfBandSource =
        switch kind {
        case "qr": .qrText(payload)
        case "link": .link(payload)
        default: .push(Array(payload.utf8))
        }
      let p = try env.outOfBandPayload(source)
      let prompter = prompter(c, control: control, app: app, server: p.serverOrigin)
      if let data = p.data { prompter.dialogContext.append("The request says: \(displayable(data))") }
      guard try prompter.confirm(.outOfBand(p.operation, server: p.serverOrigin)) else {
        throw OperationError.cancelled
      }
      let tokens = try env.tokens(id: token, trace: nil) { info in
        outbox.post(.notify(summary: "Touch your key", body: "Touch your key (\(info.id))."))
      }
      control.attach(tokens.cancellers)
      outbox.post(.seen(tokens.infos))
      let choice = PinentryChoice(prompter: prompter)
      let result = try env.redeem(
        p, facetID: facet, tokens: tokens, authenticatorSelector: choice, verifier: prompter, accountSelector: choice)
      if control.isCancelled { throw OperationError.cancelled }
      return (
        0,
        [
          .init("operation", .string(result.op.rawValue)), .init("server", .string(p.serverOrigin)),
          .init("errorCode", .uint32(0)), .init("exitStatus", .uint32(0)),
        ]
      )
    } catch {
      return results(error, cancelled: control.isCancelled)
    }
  }
}

/// Account and token choices in pinentry: each usable candidate in turn ("Use …?"; Cancel goes to the next).
struct PinentryChoice: AccountSelector, AuthenticatorSelector {
  let prompter: Prompter

  func ask(_ line: String) throws -> Bool {
    guard let pinentry = prompter.pinentry else { throw InteractionError.cancelled }
    return try pinentry.confirm(
      title: Prompter.title, description: ([line] + prompter.dialogContext).joined(separator: "\n"), ok: "Use this",
      cancel: "Next")
  }

  func selectAccount(from accounts: [AuthenticatorRecord]) throws -> AuthenticatorRecord {
    for a in accounts where try ask("Sign in as \(displayable(a.username)) with \(a.tokenID)?") { return a }
    throw InteractionError.cancelled
  }

  func selectAccount(among candidates: [SelectionCandidate], usable: [AuthenticatorRecord]) throws
    -> AuthenticatorRecord
  {
    try selectAccount(from: usable)
  }

  func selectAuthenticator(from items: [AuthenticatorItem]) throws -> AuthenticatorItem {
    for i in items where i.candidate.isUsable {
      if try ask("Register with \(displayable(i.token.name)) (\(i.token.id))?") { return i }
    }
    throw InteractionError.cancelled
  }
}

/// The introspection data (gdbus reads the signatures from it).
enum Introspection {
  static let header =
    "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\" "
    + "\"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n"
  static let standard = """
     <interface name="org.freedesktop.DBus.Introspectable">
      <method name="Introspect"><arg name="xml" type="s" direction="out"/></method>
     </interface>
     <interface name="org.freedesktop.DBus.Peer">
      <method name="Ping"/>
      <method name="GetMachineId"><arg name="id" type="s" direction="out"/></method>
     </interface>

    """
  static let main =
    header + """
      <node>
       <interface name="org.tokenbridge.TokenBridge1">
        <method name="Discover"><arg name="discovery" type="a{sv}" direction="out"/></method>
        <method name="CheckPolicy"><arg name="message" type="s" direction="in"/><arg name="options" type="a{sv}" direction="in"/><arg name="errorCode" type="u" direction="out"/></method>
        <method name="ProcessUAFOperation"><arg name="parent_window" type="s" direction="in"/><arg name="message" type="s" direction="in"/><arg name="channel_bindings" type="s" direction="in"/><arg name="options" type="a{sv}" direction="in"/><arg name="request" type="o" direction="out"/></method>
        <method name="NotifyUAFResult"><arg name="response_code" type="u" direction="in"/><arg name="message" type="s" direction="in"/></method>
        <method name="ProcessOutOfBand"><arg name="parent_window" type="s" direction="in"/><arg name="kind" type="s" direction="in"/><arg name="payload" type="s" direction="in"/><arg name="options" type="a{sv}" direction="in"/><arg name="request" type="o" direction="out"/></method>
        <method name="ListTokens"><arg name="options" type="a{sv}" direction="in"/><arg name="tokens" type="aa{sv}" direction="out"/></method>
       </interface>
      \(standard)</node>

      """
  static let request =
    header + """
      <node>
       <interface name="org.tokenbridge.TokenBridge1.Request">
        <method name="Close"/>
        <signal name="Response"><arg name="response" type="u"/><arg name="results" type="a{sv}"/></signal>
       </interface>
      \(standard)</node>

      """
  static let empty = header + "<node>\n" + standard + "</node>\n"
}
