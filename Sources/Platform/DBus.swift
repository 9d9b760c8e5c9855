import CSDBus
import Glibc

/// A D-Bus value, as `tokenbridge serve` sends and reads them (docs/dbus-api.md). `dict` is `a{sv}`.
public indirect enum DBusValue: Equatable, Sendable {
  case string(String)
  case objectPath(String)
  case bool(Bool)
  case uint16(UInt16)
  case uint32(UInt32)
  case int32(Int32)
  /// A Unix fd (`h`): a duplicate the reader owns (close it).
  case fd(Int32)
  /// An array whose elements have the signature `element`.
  case array(element: String, [DBusValue])
  /// `a{sv}`, in order.
  case dict([DictEntry])
  case structure([DBusValue])
  case variant(DBusValue)

  public struct DictEntry: Equatable, Sendable {
    public var key: String
    public var value: DBusValue
    public init(_ key: String, _ value: DBusValue) {
      self.key = key
      self.value = value
    }
  }

  public var signature: String {
    switch self {
    case .string: "s"
    case .objectPath: "o"
    case .bool: "b"
    case .uint16: "q"
    case .uint32: "u"
    case .int32: "i"
    case .fd: "h"
    case .array(let e, _): "a" + e
    case .dict: "a{sv}"
    case .structure(let items): "(" + items.map(\.signature).joined() + ")"
    case .variant: "v"
    }
  }

  /// The value of `key` in an `a{sv}` (the variant unwrapped).
  public subscript(key: String) -> DBusValue? {
    guard case .dict(let entries) = self else { return nil }
    guard let v = entries.first(where: { $0.key == key })?.value else { return nil }
    if case .variant(let inner) = v { return inner }
    return v
  }

  public var stringValue: String? {
    if case .string(let s) = self { return s }
    return nil
  }
}

/// A D-Bus error (a reply's error name and message, or why a call into sd-bus failed).
public struct DBusError: Error, Equatable, Sendable {
  public var name: String
  public var message: String
  public init(name: String, message: String) {
    self.name = name
    self.message = message
  }

  static func errno(_ what: String, _ rc: Int32) -> DBusError {
    DBusError(name: "org.freedesktop.DBus.Error.Failed", message: "\(what): \(String(cString: strerror(-rc)))")
  }
}

/// One message (method call, reply, signal), holding one reference.
public final class DBusMessage {
  let m: OpaquePointer

  init(taking m: OpaquePointer) { self.m = m }
  init(retaining m: OpaquePointer) {
    sd_bus_message_ref(m)
    self.m = m
  }
  deinit { sd_bus_message_unref(m) }

  func text(_ p: UnsafePointer<CChar>?) -> String? { p.map { String(cString: $0) } }
  public var member: String? { text(sd_bus_message_get_member(m)) }
  public var interface: String? { text(sd_bus_message_get_interface(m)) }
  public var path: String? { text(sd_bus_message_get_path(m)) }
  public var sender: String? { text(sd_bus_message_get_sender(m)) }
  public var signature: String { text(sd_bus_message_get_signature(m, 1)) ?? "" }
  public var isMethodCall: Bool { sd_bus_message_is_method_call(m, nil, nil) > 0 }
  /// An error reply's name and message.
  public var error: DBusError? {
    guard let e = sd_bus_message_get_error(m), let name = e.pointee.name else { return nil }
    return DBusError(name: String(cString: name), message: text(e.pointee.message) ?? "")
  }

  /// Every argument of the body, in order.
  public func arguments() throws(DBusError) -> [DBusValue] {
    var out: [DBusValue] = []
    _ = sd_bus_message_rewind(m, 1)
    while let v = try readNext() { out.append(v) }
    return out
  }

  func readNext() throws(DBusError) -> DBusValue? {
    var type: CChar = 0
    var contents: UnsafePointer<CChar>?
    let r = sd_bus_message_peek_type(m, &type, &contents)
    if r < 0 { throw .errno("reading a message", r) }
    if r == 0 { return nil }
    let inner = contents.map { String(cString: $0) } ?? ""
    switch UInt8(bitPattern: type) {
    case UInt8(ascii: "s"), UInt8(ascii: "o"), UInt8(ascii: "g"):
      var p: UnsafePointer<CChar>?
      try check(withUnsafeMutablePointer(to: &p) { sd_bus_message_read_basic(m, type, $0) }, "reading a string")
      let s = p.map { String(cString: $0) } ?? ""
      return type == CChar(UInt8(ascii: "o")) ? .objectPath(s) : .string(s)
    case UInt8(ascii: "b"):
      var v: Int32 = 0
      try check(sd_bus_message_read_basic(m, type, &v), "reading a boolean")
      return .bool(v != 0)
    case UInt8(ascii: "q"):
      var v: UInt16 = 0
      try check(sd_bus_message_read_basic(m, type, &v), "reading a uint16")
      return .uint16(v)
    case UInt8(ascii: "u"):
      var v: UInt32 = 0
      try check(sd_bus_message_read_basic(m, type, &v), "reading a uint32")
      return .uint32(v)
    case UInt8(ascii: "i"):
      var v: Int32 = 0
      try check(sd_bus_message_read_basic(m, type, &v), "reading an int32")
      return .int32(v)
    case UInt8(ascii: "h"):
      var v: Int32 = -1
      try check(sd_bus_message_read_basic(m, type, &v), "reading a fd")
      return .fd(fcntl(v, F_DUPFD_CLOEXEC, 3))
    case UInt8(ascii: "v"):
      try check(sd_bus_message_enter_container(m, type, inner), "entering a variant")
      let v = try readNext()
      try check(sd_bus_message_exit_container(m), "leaving a variant")
      return .variant(v ?? .string(""))
    case UInt8(ascii: "a"):
      try check(sd_bus_message_enter_container(m, type, inner), "entering an array")
      var items: [DBusValue] = []
      var entries: [DBusValue.DictEntry] = []
      let isDict = inner == "{sv}"
      while true {
        if isDict {
          let r = sd_bus_message_enter_container(m, CChar(UInt8(ascii: "e")), "sv")
          if r < 0 { throw .errno("entering a dictionary entry", r) }
          if r == 0 { break }
          guard case .string(let k)? = try readNext(), let v = try readNext() else {
            throw DBusError(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "bad a{sv} entry")
          }
          try check(sd_bus_message_exit_container(m), "leaving a dictionary entry")
          entries.append(.init(k, v))
        } else {
          guard let v = try readNext() else { break }
          items.append(v)
        }
      }
      try check(sd_bus_message_exit_container(m), "leaving an array")
      return isDict ? .dict(entries) : .array(element: inner, items)
    case UInt8(ascii: "r"), UInt8(ascii: "e"):
      try check(sd_bus_message_enter_container(m, type, inner), "entering a structure")
      var items: [DBusValue] = []
      while let v = try readNext() { items.append(v) }
      try check(sd_bus_message_exit_container(m), "leaving a structure")
      return .structure(items)
    default:
      // A type this service never takes (doubles, bytes, 64-bit): skipped, read as nothing useful.
      try check(sd_bus_message_skip(m, String(UnicodeScalar(UInt8(bitPattern: type)))), "skipping a value")
      return .string("")
    }
  }

  /// Appends `values` to the body.
  public func append(_ values: [DBusValue]) throws(DBusError) {
    for v in values { try append(v) }
  }

  func append(_ v: DBusValue) throws(DBusError) {
    func basic(_ t: String, _ p: UnsafeRawPointer) throws(DBusError) {
      try check(sd_bus_message_append_basic(m, CChar(t.utf8.first!), p), "appending a value")
    }
    switch v {
    case .string(let s), .objectPath(let s):
      // D-Bus strings hold no NUL: one is cut there (sd-bus would refuse the whole message otherwise).
      var bytes = Array(s.utf8.prefix { $0 != 0 })
      bytes.append(0)
      let t = CChar(v.signature.utf8.first!)
      try check(bytes.withUnsafeBytes { sd_bus_message_append_basic(m, t, $0.baseAddress) }, "appending a string")
    case .bool(let b):
      var x: Int32 = b ? 1 : 0
      try basic("b", &x)
    case .uint16(var x): try basic("q", &x)
    case .uint32(var x): try basic("u", &x)
    case .int32(var x): try basic("i", &x)
    case .fd(var x): try basic("h", &x)
    case .variant(let inner):
      try check(sd_bus_message_open_container(m, CChar(UInt8(ascii: "v")), inner.signature), "opening a variant")
      try append(inner)
      try check(sd_bus_message_close_container(m), "closing a variant")
    case .array(let element, let items):
      try check(sd_bus_message_open_container(m, CChar(UInt8(ascii: "a")), element), "opening an array")
      for i in items { try append(i) }
      try check(sd_bus_message_close_container(m), "closing an array")
    case .dict(let entries):
      try check(sd_bus_message_open_container(m, CChar(UInt8(ascii: "a")), "{sv}"), "opening a dictionary")
      for e in entries {
        try check(sd_bus_message_open_container(m, CChar(UInt8(ascii: "e")), "sv"), "opening an entry")
        try append(.string(e.key))
        if case .variant = e.value { try append(e.value) } else { try append(.variant(e.value)) }
        try check(sd_bus_message_close_container(m), "closing an entry")
      }
      try check(sd_bus_message_close_container(m), "closing a dictionary")
    case .structure(let items):
      let inner = String(v.signature.dropFirst().dropLast())
      try check(sd_bus_message_open_container(m, CChar(UInt8(ascii: "r")), inner), "opening a structure")
      for i in items { try append(i) }
      try check(sd_bus_message_close_container(m), "closing a structure")
    }
  }
}

func check(_ rc: Int32, _ what: String) throws(DBusError) {
  if rc < 0 { throw .errno(what, rc) }
}

/// A connection to a bus through sd-bus (libsystemd, loaded at first use). Not thread-safe: one thread (the
/// service's loop) uses it; other threads hand it work through that loop.
public final class DBusConnection {
  let bus: OpaquePointer
  /// Handlers passed to sd-bus as userdata, kept alive as long as the connection.
  var boxes: [HandlerBox] = []

  final class HandlerBox {
    let handle: (DBusMessage) -> Bool
    init(_ handle: @escaping (DBusMessage) -> Bool) { self.handle = handle }
  }

  /// The session bus (`$DBUS_SESSION_BUS_ADDRESS`, else the user's runtime directory), or `address`.
  public init(address: String? = nil) throws {
    try SystemLibrary.systemd.load()
    var b: OpaquePointer?
    if let address {
      try check(sd_bus_new(&b), "sd_bus_new")
      guard let b else { throw DBusError.errno("sd_bus_new", -ENOMEM) }
      try check(sd_bus_set_address(b, address), "the bus address \(address)")
      try check(sd_bus_set_bus_client(b, 1), "sd_bus_set_bus_client")
      let r = sd_bus_start(b)
      if r < 0 {
        sd_bus_unref(b)
        throw DBusError.errno("connecting to \(address)", r)
      }
      bus = b
    } else {
      try check(sd_bus_open_user(&b), "connecting to the session bus")
      guard let b else { throw DBusError.errno("sd_bus_open_user", -ENOMEM) }
      bus = b
    }
  }

  deinit { sd_bus_flush_close_unref(bus) }

  public var uniqueName: String {
    var p: UnsafePointer<CChar>?
    _ = sd_bus_get_unique_name(bus, &p)
    return p.map { String(cString: $0) } ?? ""
  }

  /// Takes `name`; fails when another connection owns it.
  public func requestName(_ name: String) throws(DBusError) {
    try check(sd_bus_request_name(bus, name, 0), "taking the bus name \(name)")
  }

  static let trampoline: sd_bus_message_handler_t = { m, userdata, _ in
    guard let m, let userdata else { return 0 }
    let box = Unmanaged<HandlerBox>.fromOpaque(userdata).takeUnretainedValue()
    return box.handle(DBusMessage(retaining: m)) ? 1 : 0
  }

  func box(_ handle: @escaping (DBusMessage) -> Bool) -> UnsafeMutableRawPointer {
    let b = HandlerBox(handle)
    boxes.append(b)
    return Unmanaged.passUnretained(b).toOpaque()
  }

  /// Every message to `path` (true: handled; false: sd-bus's own answer, e.g. UnknownMethod).
  public func addObject(_ path: String, _ handle: @escaping (DBusMessage) -> Bool) throws(DBusError) {
    try check(sd_bus_add_object(bus, nil, path, Self.trampoline, box(handle)), "registering \(path)")
  }

  /// Every message to a path below `prefix`.
  public func addFallback(_ prefix: String, _ handle: @escaping (DBusMessage) -> Bool) throws(DBusError) {
    try check(sd_bus_add_fallback(bus, nil, prefix, Self.trampoline, box(handle)), "registering \(prefix)/*")
  }

  /// Every message matching `rule` (a match rule, also added at the bus).
  public func addMatch(_ rule: String, _ handle: @escaping (DBusMessage) -> Bool) throws(DBusError) {
    try check(sd_bus_add_match(bus, nil, rule, Self.trampoline, box(handle)), "adding the match \(rule)")
  }

  /// Handles everything that has arrived (the handlers run here).
  public func dispatch() throws(DBusError) {
    while true {
      let r = sd_bus_process(bus, nil)
      if r < 0 { throw .errno("processing the bus", r) }
      if r == 0 { return }
    }
  }

  /// The descriptor and the poll events to wait for, and sd-bus's own deadline (CLOCK_MONOTONIC µs; nil: none).
  public var pollState: (fd: Int32, events: Int16, deadlineMicros: UInt64?) {
    var t: UInt64 = 0
    let hasTimeout = sd_bus_get_timeout(bus, &t) >= 0 && t != UInt64.max
    return (sd_bus_get_fd(bus), Int16(truncatingIfNeeded: sd_bus_get_events(bus)), hasTimeout ? t : nil)
  }

  public func newMethodCall(destination: String, path: String, interface: String, member: String) throws(DBusError)
    -> DBusMessage
  {
    var m: OpaquePointer?
    try check(sd_bus_message_new_method_call(bus, &m, destination, path, interface, member), "a call to \(member)")
    return DBusMessage(taking: m!)
  }

  /// A signal; with `destination`, sent to that connection only (unicast).
  public func newSignal(path: String, interface: String, member: String, destination: String?) throws(DBusError)
    -> DBusMessage
  {
    var m: OpaquePointer?
    try check(sd_bus_message_new_signal(bus, &m, path, interface, member), "the signal \(member)")
    let msg = DBusMessage(taking: m!)
    if let destination { try check(sd_bus_message_set_destination(m, destination), "the signal's destination") }
    return msg
  }

  public func newReturn(to call: DBusMessage) throws(DBusError) -> DBusMessage {
    var m: OpaquePointer?
    try check(sd_bus_message_new_method_return(call.m, &m), "a reply")
    return DBusMessage(taking: m!)
  }

  /// Answers `call` with the error `name` (`message` as its text).
  public func replyError(to call: DBusMessage, name: String, message: String) {
    var e = sd_bus_error(name: nil, message: nil, _need_free: 0)
    _ = sd_bus_error_set(&e, name, message)
    _ = sd_bus_reply_method_error(call.m, &e)
    sd_bus_error_free(&e)
  }

  /// Queues `m` (written out by the next dispatch or flush).
  public func send(_ m: DBusMessage, expectReply: Bool = true) throws(DBusError) {
    if !expectReply { _ = sd_bus_message_set_expect_reply(m.m, 0) }
    try check(sd_bus_send(bus, m.m, nil), "sending a message")
  }

  /// A method call and its reply (blocking, `timeoutMicros` at most; 0: sd-bus's default of 25 s).
  public func call(_ m: DBusMessage, timeoutMicros: UInt64 = 0) throws(DBusError) -> DBusMessage {
    var e = sd_bus_error(name: nil, message: nil, _need_free: 0)
    defer { sd_bus_error_free(&e) }
    var reply: OpaquePointer?
    let r = sd_bus_call(bus, m.m, timeoutMicros, &e, &reply)
    if r < 0 {
      if let n = e.name {
        throw DBusError(name: String(cString: n), message: e.message.map { String(cString: $0) } ?? "")
      }
      throw .errno("calling \(m.member ?? "")", r)
    }
    return DBusMessage(taking: reply!)
  }

  public func flush() { _ = sd_bus_flush(bus) }
}
