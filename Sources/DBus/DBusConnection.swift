import CSDBus
import Glibc
import Platform

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

  /// Gives `name` back: the bus routes no further call to it here (D-Bus activation starts another owner).
  public func releaseName(_ name: String) throws(DBusError) {
    try check(sd_bus_release_name(bus, name), "releasing the bus name \(name)")
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
