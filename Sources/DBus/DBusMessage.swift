import CSDBus
import Glibc

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
