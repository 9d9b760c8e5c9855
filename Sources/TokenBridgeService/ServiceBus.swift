import DBus

/// One message that reached the service, as the dispatcher reads it: an sd-bus message, or a test's fake.
public protocol BusCall: AnyObject {
  var sender: String? { get }
  var path: String? { get }
  var interface: String? { get }
  var member: String? { get }
  /// The body's signature (`sa{sv}`).
  var signature: String { get }
  var isMethodCall: Bool { get }
  /// Every argument of the body, in order.
  func arguments() throws(DBusError) -> [DBusValue]
}

/// What the dispatcher asks of its bus: answers, signals and the two calls it makes to the bus itself. The
/// implementation owns the connection and is used from one thread (the service's loop).
public protocol ServiceBus: AnyObject {
  func reply(to call: any BusCall, _ values: [DBusValue]) throws(DBusError)
  /// Answers `call` with the error `name` (`message` as its text).
  func replyError(to call: any BusCall, name: String, message: String)
  /// A signal to `destination` only (unicast).
  func signal(path: String, interface: String, member: String, destination: String, _ values: [DBusValue])
    throws(DBusError)
  /// `org.freedesktop.DBus.GetConnectionCredentials` of a unique name.
  func credentials(of sender: String) throws(DBusError) -> DBusValue
  /// A method call that wants no reply (desktop notifications).
  func callWithoutReply(destination: String, path: String, interface: String, member: String, _ values: [DBusValue])
    throws(DBusError)
}

extension DBusMessage: BusCall {}
