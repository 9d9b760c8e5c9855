import FoundationEssentials
import Glibc
import Platform
import Synchronization
import TokenBridge

/// `tokenbridge serve` (docs/dbus-api.md): one thread owns the bus (sd-bus is not thread-safe) and answers; every
/// method that may touch a token, the network or a prompt runs on a thread of its own and hands its outcome back
/// through `outbox` (the loop wakes on a pipe), which the loop turns into the reply or the `Response` signal.
final class Service {
  static let busName = "org.tokenbridge.TokenBridge1"
  static let objectPath = "/org/tokenbridge/TokenBridge1"
  static let interface = "org.tokenbridge.TokenBridge1"
  static let requestPrefix = "/org/tokenbridge/TokenBridge1/request"
  static let requestInterface = "org.tokenbridge.TokenBridge1.Request"
  static let errorPrefix = "org.tokenbridge.TokenBridge1.Error."

  let bus: DBusConnection
  let configuration: Configuration
  let idleTimeout: Double
  let uid = getuid()
  var nextRequest = 1
  var requests: [String: Request] = [:]
  /// Method calls answered later (by id), and how many threads are working.
  var pendingCalls: [Int: DBusMessage] = [:]
  var nextCall = 1
  /// Tokens an operation runs on ("*": every token, an operation without options["token"]).
  var busy: [String: String] = [:]  // token → request path
  /// Callers' identities by unique name (dropped when the name leaves the bus).
  var identities: [String: CallerIdentity] = [:]
  /// Registrations answered to a caller, by response message: NotifyUAFResult abandons one the server refused.
  var answered: [String: (sender: String, keyID: String)] = [:]
  var lastActivity = ContinuousClock.now
  /// The tokens the last operation found (`ServiceWork.Context.seen`).
  var seen: [TokenInfo] = []
  let outbox = Outbox()

  /// One open request (a ProcessUAFOperation or ProcessOutOfBand).
  final class Request {
    let path: String
    let sender: String
    let token: String
    let control = RequestControl()
    init(path: String, sender: String, token: String) {
      self.path = path
      self.sender = sender
      self.token = token
    }
  }

  init(address: String?, configuration: Configuration, idleTimeout: Double) throws {
    self.configuration = configuration
    self.idleTimeout = idleTimeout
    bus = try DBusConnection(address: address)
    try bus.addObject(Self.objectPath) { [unowned self] m in handleMain(m) }
    try bus.addFallback(Self.requestPrefix) { [unowned self] m in handleRequest(m) }
    try bus.addMatch(
      "type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged'"
    ) { [unowned self] m in nameOwnerChanged(m) }
    try bus.requestName(Self.busName)
  }

  // MARK: The loop

  func run() throws {
    signal(SIGPIPE, SIG_IGN)
    while true {
      try bus.dispatch()
      drainOutbox()
      bus.flush()
      let idle = requests.isEmpty && pendingCalls.isEmpty
      if idle && idleTimeout > 0 && ContinuousClock.now - lastActivity >= .milliseconds(Int64(idleTimeout * 1000)) {
        return
      }
      let state = bus.pollState
      var fds = [
        pollfd(fd: state.fd, events: state.events, revents: 0),
        pollfd(fd: outbox.readFD, events: Int16(POLLIN), revents: 0),
      ]
      var ms: Int32 = 1000
      if let d = state.deadlineMicros {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let nowMicros = UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000
        ms = d <= nowMicros ? 0 : Int32(clamping: (d - nowMicros) / 1000 + 1)
        ms = min(ms, 1000)
      }
      _ = poll(&fds, 2, ms)
      if fds[1].revents != 0 { outbox.clearWake() }
    }
  }

  func drainOutbox() {
    for item in outbox.take() {
      lastActivity = .now
      switch item {
      case .reply(let id, let values):
        guard let call = pendingCalls.removeValue(forKey: id) else { continue }
        do {
          let r = try bus.newReturn(to: call)
          try r.append(values)
          try bus.send(r)
        } catch {
          bus.replyError(to: call, name: Self.errorPrefix + "Failed", message: "255: \(error)")
        }
      case .error(let id, let name, let code, let text):
        guard let call = pendingCalls.removeValue(forKey: id) else { continue }
        replyError(call, name, code, text)
      case .response(let path, let response, let results):
        guard let req = requests.removeValue(forKey: path) else { continue }
        busy = busy.filter { $0.value != path }
        if case .string(let message)? = results.first(where: { $0.key == "message" })?.value,
          case .string(let keyID)? = results.first(where: { $0.key == "registeredKeyID" })?.value
        {
          answered[message] = (req.sender, keyID)
          if let inner = UAFEnvelope.message(message) { answered[inner] = (req.sender, keyID) }
        }
        let shown = results.filter { $0.key != "registeredKeyID" }
        do {
          let s = try bus.newSignal(
            path: path, interface: Self.requestInterface, member: "Response", destination: req.sender)
          try s.append([.uint32(response), .dict(shown)])
          try bus.send(s)
        } catch {
          FileIO.writeError("tokenbridge serve: the Response of \(path) could not be sent: \(error)\n")
        }
      case .notify(let summary, let body):
        notify(summary, body)
      case .seen(let infos):
        seen = infos
      }
    }
  }

  /// A desktop notification, best effort (no notification daemon: nothing).
  func notify(_ summary: String, _ body: String) {
    guard
      let m = try? bus.newMethodCall(
        destination: "org.freedesktop.Notifications", path: "/org/freedesktop/Notifications",
        interface: "org.freedesktop.Notifications", member: "Notify")
    else { return }
    do {
      try m.append([
        .string("TokenBridge"), .uint32(0), .string("security-high"), .string(summary), .string(body),
        .array(element: "s", []), .dict([]), .int32(-1),
      ])
      try bus.send(m, expectReply: false)
    } catch {}
  }

  // MARK: Errors

  func replyError(_ call: DBusMessage, _ name: String, _ code: UAFErrorCode, _ text: String) {
    bus.replyError(to: call, name: Self.errorPrefix + name, message: "\(code.rawValue): \(text)")
  }

  // MARK: The caller

  /// The caller's identity from the bus (its uid must be ours) and its process; nil when refused (replied).
  func caller(_ m: DBusMessage) -> CallerIdentity? {
    guard let sender = m.sender else {
      replyError(m, "AccessDenied", .authenticatorAccessDenied, "a message without a sender")
      return nil
    }
    if let known = identities[sender] { return known }
    let creds: DBusValue
    do {
      let q = try bus.newMethodCall(
        destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
        member: "GetConnectionCredentials")
      try q.append([.string(sender)])
      guard let first = try bus.call(q, timeoutMicros: 5_000_000).arguments().first else {
        throw DBusError(name: "", message: "no credentials")
      }
      creds = first
    } catch {
      replyError(m, "UntrustedFacetId", .untrustedFacetID, "the bus did not say who is calling (\(error))")
      return nil
    }
    guard case .uint32(let callerUID)? = creds["UnixUserID"], callerUID == uid else {
      replyError(m, "AccessDenied", .authenticatorAccessDenied, "a caller of another user is refused")
      return nil
    }
    guard let identity = Self.identify(creds) else {
      replyError(m, "UntrustedFacetId", .untrustedFacetID, "the calling process cannot be identified")
      return nil
    }
    identities[sender] = identity
    return identity
  }

  /// The identity of the process the credentials name: through its pidfd (ProcessFD) when the bus gives one,
  /// else its pid, whose start time must not change while its files are read.
  static func identify(_ creds: DBusValue) -> CallerIdentity? {
    if case .fd(let pidfd)? = creds["ProcessFD"], pidfd >= 0 {
      defer { close(pidfd) }
      guard let pid = CallerIdentity.pid(ofPidfd: pidfd), let id = CallerIdentity.of(pid: Int32(pid)),
        CallerIdentity.isAlive(pidfd: pidfd)
      else { return nil }
      return id
    }
    guard case .uint32(let pid)? = creds["ProcessID"], pid > 0 else { return nil }
    guard let before = CallerIdentity.startTime(pid: Int32(pid)), let id = CallerIdentity.of(pid: Int32(pid)),
      CallerIdentity.startTime(pid: Int32(pid)) == before
    else { return nil }
    return id
  }

  /// The facet ID to act for: the caller's, or the origin it passed when it may (`serviceOriginCallers`).
  func facet(_ m: DBusMessage, _ identity: CallerIdentity, _ options: DBusValue) -> String? {
    guard let origin = options["origin"] else { return identity.facetID }
    guard configuration.serviceOriginCallers.contains(identity.facetID) else {
      replyError(
        m, "AccessDenied", .authenticatorAccessDenied,
        "\(identity.facetID) may not act for a web origin (serviceOriginCallers)")
      return nil
    }
    guard case .string(let o) = origin, ServiceSupport.isOrigin(o) else {
      replyError(m, "InvalidArgs", .protocolError, "origin must be https://host[:port] (http:// on loopback only)")
      return nil
    }
    return o
  }

  // MARK: Methods

  func handleMain(_ m: DBusMessage) -> Bool {
    guard m.isMethodCall else { return false }
    if m.interface == "org.freedesktop.DBus.Introspectable" && m.member == "Introspect" {
      reply(m, [.string(Introspection.main)])
      return true
    }
    guard m.interface == nil || m.interface == Self.interface else { return false }
    lastActivity = .now
    let args: [DBusValue]
    do { args = try m.arguments() } catch {
      replyError(m, "InvalidArgs", .protocolError, "\(error)")
      return true
    }
    let signatures = [
      "Discover": "", "CheckPolicy": "sa{sv}", "ProcessUAFOperation": "sssa{sv}", "NotifyUAFResult": "us",
      "ProcessOutOfBand": "sssa{sv}", "ListTokens": "a{sv}",
    ]
    guard let member = m.member, let want = signatures[member] else { return false }
    guard m.signature == want else {
      replyError(m, "InvalidArgs", .protocolError, "\(member) takes (\(want)), not (\(m.signature))")
      return true
    }
    // The options the API knows are strings (docs/dbus-api.md); one of another type is an error, not "absent".
    if let options = args.last, case .dict(let entries) = options {
      for e in entries where ["token", "origin"].contains(e.key) {
        let v: DBusValue = if case .variant(let inner) = e.value { inner } else { e.value }
        guard v.stringValue != nil else {
          replyError(m, "InvalidArgs", .protocolError, "the option \(e.key) is a string (s)")
          return true
        }
      }
    }
    guard let identity = caller(m) else { return true }
    switch member {
    case "Discover":
      let s = snapshot()
      work(m) { ServiceWork.discover(s) }
    case "ListTokens":
      let token = args[0]["token"]?.stringValue
      let s = snapshot()
      work(m) { ServiceWork.listTokens(s, token: token) }
    case "CheckPolicy":
      guard let facet = facet(m, identity, args[1]) else { return true }
      let message = args[0].stringValue ?? ""
      let token = args[1]["token"]?.stringValue
      let s = snapshot()
      work(m) { ServiceWork.checkPolicy(s, message: message, facet: facet, token: token) }
    case "NotifyUAFResult":
      guard case .uint32(let code) = args[0], let message = args[1].stringValue else { return true }
      if code != 1200, let a = answered[message], a.sender == m.sender {
        answered = answered.filter { $0.value.keyID != a.keyID }
        let keyID = a.keyID
        let s = snapshot()
        work(m) { ServiceWork.abandon(s, keyID: keyID) }
      } else {
        reply(m, [])
      }
    case "ProcessUAFOperation", "ProcessOutOfBand":
      let options = args[3]
      let isUAF = member == "ProcessUAFOperation"
      if !isUAF && !["qr", "link", "push"].contains(args[1].stringValue ?? "") {
        replyError(m, "InvalidArgs", .protocolError, "kind must be \"qr\", \"link\" or \"push\"")
        return true
      }
      // Out-of-band operations too run under the caller's verified facet (or the origin a named caller acts for),
      // not the payload's server: a payload is something the caller passes.
      guard let facet = self.facet(m, identity, options) else { return true }
      guard let req = open(m, token: options["token"]?.stringValue) else { return true }
      let s = snapshot()
      let control = req.control
      let path = req.path
      // A web origin is what the user must see; the program that passed it follows.
      let app = facet == identity.facetID ? facet : "\(facet) (web page, through \(identity.facetID))"
      let a1 = args[1].stringValue ?? ""
      let a2 = args[2].stringValue ?? ""
      let token = options["token"]?.stringValue
      let outbox = self.outbox
      reply(m, [.objectPath(path)])
      POSIXThread.start {
        let (response, results) =
          isUAF
          ? ServiceWork.processUAF(
            s, message: a1, channelBinding: a2, facet: facet, app: app, token: token, control: control, outbox: outbox)
          : ServiceWork.processOutOfBand(
            s, kind: a1, payload: a2, facet: facet, app: app, token: token, control: control, outbox: outbox)
        outbox.post(.response(path: path, response: response, results: results))
      }
    default: return false
    }
    return true
  }

  /// A new request object, unless its token is busy (replied with Busy).
  func open(_ m: DBusMessage, token: String?) -> Request? {
    let key = token ?? "*"
    if busy["*"] != nil || (token == nil && !busy.isEmpty) || busy[key] != nil {
      replyError(
        m, "Busy", .insufficientAuthenticatorResources,
        token.map { "an operation is running on \($0)" } ?? "an operation is running on a token")
      return nil
    }
    let path = "\(Self.requestPrefix)/\(nextRequest)"
    nextRequest += 1
    let req = Request(path: path, sender: m.sender ?? "", token: key)
    requests[path] = req
    busy[key] = path
    return req
  }

  func handleRequest(_ m: DBusMessage) -> Bool {
    guard m.isMethodCall, let path = m.path else { return false }
    if m.interface == "org.freedesktop.DBus.Introspectable" && m.member == "Introspect" {
      reply(m, [.string(requests[path] == nil ? Introspection.empty : Introspection.request)])
      return true
    }
    guard m.member == "Close", m.interface == nil || m.interface == Self.requestInterface else { return false }
    guard let req = requests[path] else {
      replyError(m, "NotFound", .unknown, "no request \(path)")
      return true
    }
    guard req.sender == m.sender else {
      replyError(m, "AccessDenied", .authenticatorAccessDenied, "only the caller that made a request may close it")
      return true
    }
    req.control.cancel()
    reply(m, [])
    return true
  }

  func nameOwnerChanged(_ m: DBusMessage) -> Bool {
    guard let args = try? m.arguments(), args.count == 3, case .string(let name) = args[0],
      case .string(let newOwner) = args[2], name.hasPrefix(":"), newOwner.isEmpty
    else { return false }
    identities[name] = nil
    answered = answered.filter { $0.value.sender != name }
    for r in requests.values where r.sender == name { r.control.cancel() }
    return false
  }

  func reply(_ m: DBusMessage, _ values: [DBusValue]) {
    do {
      let r = try bus.newReturn(to: m)
      try r.append(values)
      try bus.send(r)
    } catch {
      bus.replyError(to: m, name: Self.errorPrefix + "Failed", message: "255: \(error)")
    }
  }

  /// Runs `body` on a thread of its own; its outcome is the reply.
  func work(_ m: DBusMessage, _ body: @escaping @Sendable () -> Outbox.Outcome) {
    let id = nextCall
    nextCall += 1
    pendingCalls[id] = m
    let outbox = self.outbox
    POSIXThread.start {
      switch body() {
      case .values(let v): outbox.post(.reply(id: id, values: v))
      case .failure(let name, let code, let text): outbox.post(.error(id: id, name: name, code: code, text: text))
      }
    }
  }

  /// What a worker needs of the service (Sendable).
  func snapshot() -> ServiceWork.Context {
    ServiceWork.Context(configuration: configuration, busyTokens: Set(busy.keys), seen: seen)
  }
}

/// A request's cancellation: Close, or its caller leaving the bus. Ends a pinentry dialog at once and sends
/// CTAPHID_CANCEL to a FIDO2 key waiting for a touch.
final class RequestControl: Sendable {
  let cancelled = Mutex(false)
  let pinentry = Mutex<PinentryCancellation?>(nil)
  let cancellers = Mutex<[Canceller]>([])

  var isCancelled: Bool { cancelled.withLock { $0 } }

  func cancel() {
    cancelled.withLock { $0 = true }
    pinentry.withLock { $0?.requestNow() }
    for c in cancellers.withLock({ $0 }) { _ = c.cancel() }
  }

  /// The dialog of this request: cancelled at once if the request already is.
  func attach(_ p: PinentryCancellation) {
    pinentry.withLock { $0 = p }
    if isCancelled { p.requestNow() }
  }

  func attach(_ list: [Canceller]) {
    cancellers.withLock { $0 = list }
    if isCancelled { for c in list { _ = c.cancel() } }
  }
}

/// What worker threads hand to the loop; the pipe wakes it.
final class Outbox: Sendable {
  enum Item: Sendable {
    case reply(id: Int, values: [DBusValue])
    case error(id: Int, name: String, code: UAFErrorCode, text: String)
    case response(path: String, response: UInt32, results: [DBusValue.DictEntry])
    case notify(summary: String, body: String)
    case seen([TokenInfo])
  }
  enum Outcome: Sendable {
    case values([DBusValue])
    case failure(name: String, code: UAFErrorCode, text: String)
  }
  let items = Mutex<[Item]>([])
  let readFD: Int32
  let writeFD: Int32

  init() {
    var fds: [Int32] = [0, 0]
    _ = pipe(&fds)
    for fd in fds {
      _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
      _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    }
    readFD = fds[0]
    writeFD = fds[1]
  }

  func post(_ item: Item) {
    items.withLock { $0.append(item) }
    var b: UInt8 = 1
    _ = write(writeFD, &b, 1)
  }

  func take() -> [Item] {
    items.withLock { i in
      defer { i = [] }
      return i
    }
  }

  func clearWake() {
    var buf = [UInt8](repeating: 0, count: 256)
    while read(readFD, &buf, buf.count) > 0 {}
  }
}
