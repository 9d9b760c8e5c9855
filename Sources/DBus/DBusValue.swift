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
