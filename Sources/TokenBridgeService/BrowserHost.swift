import DBus
import FoundationEssentials
import Glibc
import Platform
import TokenBridge

/// The host's loop: one thread polls stdin and the bus. Each call is answered once, by its id; a
/// processUAFOperation is answered when the service's request object sends its `Response`.
public final class BrowserHost {
  public init() {}

  static let busName = "org.tokenbridge.TokenBridge1"
  static let objectPath = "/org/tokenbridge/TokenBridge1"
  static let interface = "org.tokenbridge.TokenBridge1"
  static let requestInterface = "org.tokenbridge.TokenBridge1.Request"

  var reader = NativeMessaging.FrameReader()
  var bus: DBusConnection?
  /// Open requests: object path → (call id, the service's unique name).
  var open: [String: (id: Int, service: String)] = [:]

  /// Runs until stdin ends; the exit status (0: the browser closed the connection between frames).
  public func run() -> Int32 {
    var chunk = [UInt8](repeating: 0, count: 64 * 1024)
    while true {
      pump()
      var fds = [pollfd(fd: 0, events: Int16(POLLIN), revents: 0)]
      if let bus { fds.append(pollfd(fd: bus.pollState.fd, events: bus.pollState.events, revents: 0)) }
      if poll(&fds, nfds_t(fds.count), 1000) < 0 && errno != EINTR { return fail("poll: \(errno)") }
      guard fds[0].revents != 0 else { continue }
      let n = chunk.withUnsafeMutableBytes { read(0, $0.baseAddress, $0.count) }
      if n < 0 && (errno == EINTR || errno == EAGAIN) { continue }
      if n < 0 { return fail("reading stdin: \(String(cString: strerror(errno)))") }
      if n == 0 {
        do { try reader.finish() } catch { return fail("the input ended inside a frame (\(error))") }
        return 0
      }
      reader.append(chunk[0..<n])
      do {
        while let payload = try reader.next() {
          guard handle(payload) else { return 1 }
        }
      } catch {
        return fail("a frame refused (\(error))")
      }
    }
  }

  func fail(_ why: String) -> Int32 {
    FileIO.writeError("tokenbridge browser-host: \(why)\n")
    return 1
  }

  /// Handles everything the bus has delivered; a broken connection fails the open requests.
  func pump() {
    guard let bus else { return }
    do {
      try bus.dispatch()
      bus.flush()
    } catch {
      FileIO.writeError("tokenbridge browser-host: the bus connection broke (\(error.message))\n")
      for (_, r) in open { reply(r.id, .unknown) }
      open = [:]
      self.bus = nil
    }
  }

  /// One frame; false when it cannot be answered (not JSON, no id): the connection then ends.
  func handle(_ payload: [UInt8]) -> Bool {
    let request: BrowserRequest
    do { request = try BrowserRequest.parse(payload) } catch {
      guard let id = error.id else {
        FileIO.writeError("tokenbridge browser-host: \(error.reason)\n")
        return false
      }
      reply(id, error.code)
      return true
    }
    do throws(DBusError) {
      let bus = try connection()
      let origin: DBusValue = .dict([.init("origin", .string(request.origin))])
      switch request.method {
      case .discover:
        let r = try call(bus, "Discover", [])
        guard let data = r.first else { throw DBusError(name: "", message: "255: no DiscoveryData") }
        reply(request.id, .noError, ["discoveryData": Self.json(data)])
      case .checkPolicy:
        let r = try call(bus, "CheckPolicy", [.string(request.envelope), origin])
        guard case .uint32(let code)? = r.first else { throw DBusError(name: "", message: "255: no code") }
        reply(request.id, UAFErrorCode(rawValue: code) ?? .unknown)
      case .processUAFOperation:
        let m = try bus.newMethodCall(
          destination: Self.busName, path: Self.objectPath, interface: Self.interface, member: "ProcessUAFOperation")
        try m.append([.string(""), .string(request.envelope), .string(""), origin])
        let answer = try bus.call(m, timeoutMicros: 30_000_000)
        guard case .objectPath(let path)? = try answer.arguments().first, let service = answer.sender else {
          throw DBusError(name: "", message: "255: no request object")
        }
        open[path] = (request.id, service)
      case .cancel:
        // The request's Response (cancelled) still comes and answers the cancelled call's id.
        if let path = open.first(where: { $0.value.id == request.cancels })?.key {
          let m = try bus.newMethodCall(
            destination: open[path]!.service, path: path, interface: Self.requestInterface, member: "Close")
          _ = try? bus.call(m, timeoutMicros: 30_000_000)
        }
        reply(request.id, .noError)
      case .notifyUAFResult:
        let m = try bus.newMethodCall(
          destination: Self.busName, path: Self.objectPath, interface: Self.interface, member: "NotifyUAFResult")
        // The response message as the service answered it (it knows the bare one as well as its envelope).
        try m.append([.uint32(request.responseCode), .string(request.uafProtocolMessage)])
        _ = try bus.call(m, timeoutMicros: 30_000_000)
        reply(request.id, .noError)
      }
    } catch {
      // A D-Bus error reply's text starts with the UAF code (docs/dbus-api.md, "Errors").
      let code = error.message.split(separator: ":").first.flatMap { UInt32($0) }.flatMap(UAFErrorCode.init)
      FileIO.writeError("tokenbridge browser-host: \(request.method.rawValue): \(error.name) \(error.message)\n")
      reply(request.id, code ?? .unknown)
    }
    return true
  }

  func call(_ bus: DBusConnection, _ member: String, _ args: [DBusValue]) throws(DBusError) -> [DBusValue] {
    let m = try bus.newMethodCall(
      destination: Self.busName, path: Self.objectPath, interface: Self.interface, member: member)
    try m.append(args)
    return try bus.call(m, timeoutMicros: 30_000_000).arguments()
  }

  /// The session bus, connected at the first call (again after a break), with the match rules for Response
  /// (added before any request is made, docs/dbus-api.md) and for the service leaving the bus.
  func connection() throws(DBusError) -> DBusConnection {
    if let bus { return bus }
    let b: DBusConnection
    do { b = try DBusConnection() } catch let e as DBusError { throw e } catch {
      throw DBusError(name: "", message: "255: \(error)")
    }
    try b.addMatch("type='signal',interface='\(Self.requestInterface)',member='Response'") { [unowned self] m in
      response(m)
    }
    try b.addMatch(
      "type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged',"
        + "arg0='\(Self.busName)'"
    ) { [unowned self] m in serviceLeft(m) }
    bus = b
    return b
  }

  func response(_ m: DBusMessage) -> Bool {
    guard let path = m.path, let r = open[path], m.sender == r.service else { return false }
    open[path] = nil
    guard let args = try? m.arguments(), args.count == 2, case .uint32? = args.first else {
      reply(r.id, .unknown)
      return true
    }
    let code = args[1]["errorCode"].flatMap { v -> UAFErrorCode? in
      if case .uint32(let c) = v { return UAFErrorCode(rawValue: c) ?? .unknown }
      return nil
    }
    guard code == .noError, let text = args[1]["message"]?.stringValue, let inner = UAFEnvelope.message(text) else {
      reply(r.id, code ?? .unknown)
      return true
    }
    reply(r.id, .noError, ["uafProtocolMessage": .string(inner)])
    return true
  }

  /// The service left the bus: its open requests will never answer.
  func serviceLeft(_ m: DBusMessage) -> Bool {
    guard let args = try? m.arguments(), args.count == 3, case .string(let old) = args[1], args[2] == .string("")
    else { return false }
    for (path, r) in open where r.service == old {
      open[path] = nil
      reply(r.id, .unknown)
    }
    return false
  }

  func reply(_ id: Int, _ code: UAFErrorCode, _ fields: [String: BrowserReply.Value] = [:]) {
    let bytes = BrowserReply.framed(id: id, errorCode: code, fields: fields)
    var off = 0
    while off < bytes.count {
      let n = bytes[off...].withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
      if n < 0 && errno == EINTR { continue }
      if n <= 0 {
        FileIO.writeError("tokenbridge browser-host: the browser is gone (stdout closed)\n")
        exit(0)
      }
      off += n
    }
  }

  /// DiscoveryData as the DOM API's dictionaries: `(qq)` structures are `Version`s ({major, minor}).
  static func json(_ v: DBusValue) -> BrowserReply.Value {
    switch v {
    case .string(let s), .objectPath(let s): .string(s)
    case .bool(let b): .bool(b)
    case .uint16(let n): .number(Double(n))
    case .uint32(let n): .number(Double(n))
    case .int32(let n): .number(Double(n))
    case .fd: .number(-1)
    case .variant(let inner): json(inner)
    case .array(_, let items): .array(items.map(json))
    case .dict(let entries):
      .object(Dictionary(entries.map { ($0.key, json($0.value)) }, uniquingKeysWith: { a, _ in a }))
    case .structure(let items):
      if items.count == 2, case .uint16(let major) = items[0], case .uint16(let minor) = items[1] {
        .object(["major": .number(Double(major)), "minor": .number(Double(minor))])
      } else {
        .array(items.map(json))
      }
    }
  }
}
