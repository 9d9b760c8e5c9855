import DBus
import TokenBridge

/// The Client API's DiscoveryData as D-Bus values (docs/dbus-api.md, "Discover").
extension ServiceWork {
  static func dbus(_ v: UAFVersion) -> DBusValue { .structure([.uint16(UInt16(v.major)), .uint16(UInt16(v.minor))]) }

  static func dbus(_ data: DiscoveryData) -> DBusValue {
    .dict([
      .init("supportedUAFVersions", .array(element: "(qq)", data.supportedUAFVersions.map(dbus))),
      .init("clientVendor", .string(data.clientVendor)), .init("clientVersion", dbus(data.clientVersion)),
      .init("availableAuthenticators", .array(element: "a{sv}", data.availableAuthenticators.map(dbus))),
    ])
  }

  static func dbus(_ a: DiscoveredAuthenticator) -> DBusValue {
    var d: [DBusValue.DictEntry] = [
      .init("title", .string(a.title)), .init("aaid", .string(a.aaid)), .init("description", .string(a.description)),
      .init("supportedUAFVersions", .array(element: "(qq)", a.supportedUAFVersions.map(dbus))),
      .init("assertionScheme", .string(a.assertionScheme)),
      .init("authenticationAlgorithm", .uint16(a.authenticationAlgorithm)),
      .init("attestationTypes", .array(element: "q", a.attestationTypes.map { .uint16($0) })),
      .init("userVerification", .uint32(a.userVerification)), .init("keyProtection", .uint16(a.keyProtection)),
      .init("matcherProtection", .uint16(a.matcherProtection)), .init("attachmentHint", .uint32(a.attachmentHint)),
      .init("isSecondFactorOnly", .bool(a.isSecondFactorOnly)), .init("tcDisplay", .uint16(a.tcDisplay)),
    ]
    if let t = a.tcDisplayContentType { d.append(.init("tcDisplayContentType", .string(t))) }
    d += [
      .init("icon", .string(a.icon)),
      .init("supportedExtensionIDs", .array(element: "s", a.supportedExtensionIDs.map { .string($0) })),
    ]
    return .dict(d)
  }
}
