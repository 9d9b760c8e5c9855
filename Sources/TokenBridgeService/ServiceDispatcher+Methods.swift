import DBus
import Platform
import TokenBridge

extension ServiceDispatcher {
  /// The methods of `org.tokenbridge.TokenBridge1` and the signature each takes.
  enum Method: String, CaseIterable {
    case discover = "Discover"
    case checkPolicy = "CheckPolicy"
    case processUAFOperation = "ProcessUAFOperation"
    case notifyUAFResult = "NotifyUAFResult"
    case processOutOfBand = "ProcessOutOfBand"
    case listTokens = "ListTokens"

    var signature: String {
      switch self {
      case .discover: ""
      case .checkPolicy: "sa{sv}"
      case .processUAFOperation, .processOutOfBand: "sssa{sv}"
      case .notifyUAFResult: "us"
      case .listTokens: "a{sv}"
      }
    }
  }

  /// A message to the main object (true: answered; false: sd-bus answers, e.g. UnknownMethod).
  public func handleMain(_ call: any BusCall) -> Bool {
    guard call.isMethodCall else { return false }
    if call.interface == "org.freedesktop.DBus.Introspectable" && call.member == "Introspect" {
      reply(call, [.string(Introspection.main)])
      return true
    }
    guard call.interface == nil || call.interface == Self.interface else { return false }
    lastActivity = .now
    let args: [DBusValue]
    do { args = try call.arguments() } catch {
      replyError(call, "InvalidArgs", .protocolError, "\(error)")
      return true
    }
    guard let member = call.member, let method = Method(rawValue: member) else { return false }
    guard call.signature == method.signature else {
      replyError(call, "InvalidArgs", .protocolError, "\(member) takes (\(method.signature)), not (\(call.signature))")
      return true
    }
    if let refusal = Self.optionTypeRefusal(args.last) {
      replyError(call, "InvalidArgs", .protocolError, refusal)
      return true
    }
    guard let identity = caller(call) else { return true }
    switch method {
    case .discover: discover(call)
    case .listTokens: listTokens(call, options: args[0])
    case .checkPolicy: checkPolicy(call, identity, message: args[0], options: args[1])
    case .notifyUAFResult: notifyUAFResult(call, code: args[0], message: args[1])
    case .processUAFOperation:
      let work = RequestWork.Kind.uaf(message: args[1].stringValue ?? "", channelBinding: args[2].stringValue ?? "")
      openRequest(call, identity, work, options: args[3])
    case .processOutOfBand:
      let kind = args[1].stringValue ?? ""
      guard ["qr", "link", "push"].contains(kind) else {
        replyError(call, "InvalidArgs", .protocolError, "kind must be \"qr\", \"link\" or \"push\"")
        return true
      }
      openRequest(call, identity, .outOfBand(kind: kind, payload: args[2].stringValue ?? ""), options: args[3])
    }
    return true
  }

  /// The options the API knows are strings (docs/dbus-api.md); one of another type is an error, not "absent".
  static func optionTypeRefusal(_ options: DBusValue?) -> String? {
    guard let options, case .dict(let entries) = options else { return nil }
    for entry in entries where ["token", "origin"].contains(entry.key) {
      let value: DBusValue = if case .variant(let inner) = entry.value { inner } else { entry.value }
      if value.stringValue == nil { return "the option \(entry.key) is a string (s)" }
    }
    return nil
  }

  func discover(_ call: any BusCall) {
    let live = self.live
    let operations = self.operations
    work(call) { operations.discover(live.read()) }
  }

  func listTokens(_ call: any BusCall, options: DBusValue) {
    let token = options["token"]?.stringValue
    let live = self.live
    let operations = self.operations
    work(call) { operations.listTokens(live.read(), token: token) }
  }

  func checkPolicy(_ call: any BusCall, _ identity: CallerIdentity, message: DBusValue, options: DBusValue) {
    guard let facet = facet(call, identity, options) else { return }
    let text = message.stringValue ?? ""
    let token = options["token"]?.stringValue
    let live = self.live
    let operations = self.operations
    // CheckPolicy always answers a UAF code: a check that could not finish is "no suitable authenticator", the
    // code of a pcscd that does not answer.
    let overdue = Outbox.Outcome.values([.uint32(UAFErrorCode(ServiceSupport.tokensDoNotAnswer.status).rawValue)])
    work(call, overdue: overdue) {
      operations.checkPolicy(live.read(), message: text, facet: facet, token: token)
    }
  }

  /// A registration answered to this caller that the server refused is abandoned; anything else is a no-op.
  func notifyUAFResult(_ call: any BusCall, code: DBusValue, message: DBusValue) {
    guard case .uint32(let status) = code, let text = message.stringValue else { return }
    guard status != 1200, let registration = answered[text], registration.sender == call.sender else {
      reply(call, [])
      return
    }
    answered = answered.filter { $0.value.keyID != registration.keyID }
    let keyID = registration.keyID
    let context = snapshot()
    let operations = self.operations
    work(call) { operations.abandon(context, keyID: keyID) }
  }

  /// ProcessUAFOperation and ProcessOutOfBand: a request object, answered at once with its path; the operation runs
  /// on a thread of its own and ends in the request's `Response`. Out-of-band operations too run under the caller's
  /// verified facet (or the origin a named caller acts for), not the payload's server: a payload is something the
  /// caller passes.
  func openRequest(_ call: any BusCall, _ identity: CallerIdentity, _ kind: RequestWork.Kind, options: DBusValue) {
    guard let facet = facet(call, identity, options) else { return }
    let token = options["token"]?.stringValue
    guard let request = open(call, token: token) else { return }
    // A web origin is what the user must see in the dialogs; the program that passed it follows.
    let app = facet == identity.facetID ? facet : "\(facet) (web page, through \(identity.facetID))"
    let work = RequestWork(kind: kind, facet: facet, app: app, token: token)
    let context = snapshot()
    let control = request.control
    let path = request.path
    let outbox = self.outbox
    let operations = self.operations
    reply(call, [.objectPath(path)])
    POSIXThread.start {
      let outcome = operations.process(context, work, control: control, outbox: outbox)
      outbox.post(.response(path: path, outcome: outcome))
    }
  }

  /// A new request object, unless its token is busy (replied with Busy).
  func open(_ call: any BusCall, token: String?) -> Request? {
    let key = token ?? "*"
    if busy["*"] != nil || (token == nil && !busy.isEmpty) || busy[key] != nil {
      replyError(
        call, "Busy", .insufficientAuthenticatorResources,
        token.map { "an operation is running on \($0)" } ?? "an operation is running on a token")
      return nil
    }
    let path = "\(Self.requestPrefix)/\(nextRequest)"
    nextRequest += 1
    let request = Request(path: path, sender: call.sender ?? "", token: key)
    requests[path] = request
    busy[key] = path
    return request
  }

  /// A message to a request object: Introspect, or Close by the caller that made it.
  public func handleRequest(_ call: any BusCall) -> Bool {
    guard call.isMethodCall, let path = call.path else { return false }
    if call.interface == "org.freedesktop.DBus.Introspectable" && call.member == "Introspect" {
      reply(call, [.string(requests[path] == nil ? Introspection.empty : Introspection.request)])
      return true
    }
    guard call.member == "Close", call.interface == nil || call.interface == Self.requestInterface else {
      return false
    }
    guard let request = requests[path] else {
      replyError(call, "NotFound", .unknown, "no request \(path)")
      return true
    }
    guard request.sender == call.sender else {
      replyError(call, "AccessDenied", .authenticatorAccessDenied, "only the caller that made a request may close it")
      return true
    }
    request.control.cancel()
    reply(call, [])
    return true
  }
}
