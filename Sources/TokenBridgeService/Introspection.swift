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
