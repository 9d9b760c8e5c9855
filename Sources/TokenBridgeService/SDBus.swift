import DBus

/// The service's bus: one sd-bus connection (the session bus, or an address), driven by `ServiceLoop`.
final class SDBus: ServiceBus {
  let connection: DBusConnection

  init(address: String?) throws {
    connection = try DBusConnection(address: address)
  }

  func message(_ call: any BusCall) -> DBusMessage {
    // Every call the dispatcher answers came from this connection's handlers.
    call as! DBusMessage
  }

  func reply(to call: any BusCall, _ values: [DBusValue]) throws(DBusError) {
    let answer = try connection.newReturn(to: message(call))
    try answer.append(values)
    try connection.send(answer)
  }

  func replyError(to call: any BusCall, name: String, message text: String) {
    connection.replyError(to: message(call), name: name, message: text)
  }

  func signal(path: String, interface: String, member: String, destination: String, _ values: [DBusValue])
    throws(DBusError)
  {
    let message = try connection.newSignal(
      path: path, interface: interface, member: member, destination: destination)
    try message.append(values)
    try connection.send(message)
  }

  func credentials(of sender: String) throws(DBusError) -> DBusValue {
    let query = try connection.newMethodCall(
      destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
      member: "GetConnectionCredentials")
    try query.append([.string(sender)])
    guard let first = try connection.call(query, timeoutMicros: 5_000_000).arguments().first else {
      throw DBusError(name: "", message: "no credentials")
    }
    return first
  }

  func callWithoutReply(destination: String, path: String, interface: String, member: String, _ values: [DBusValue])
    throws(DBusError)
  {
    let message = try connection.newMethodCall(
      destination: destination, path: path, interface: interface, member: member)
    try message.append(values)
    try connection.send(message, expectReply: false)
  }
}
