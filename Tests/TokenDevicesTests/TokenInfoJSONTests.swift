import Foundation
import Testing

@testable import TokenDevices

/// `TokenInfo.json` writes what JSONEncoder writes for `tokens --json`, byte for byte.
struct TokenInfoJSONTests {
  static func reference(_ tokens: [TokenInfo]) throws -> String {
    let enc = JSONEncoder()
    enc.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    return String(decoding: try enc.encode(tokens), as: UTF8.self)
  }

  static let pin = PINStatus(
    kind: .pin, retriesLeft: 3, maxRetries: 3, isDefault: true, isVerified: false, powerCycleRequired: false)
  static let info = FIDO2Info(
    versions: ["U2F_V2", "FIDO_2_0", "FIDO_2_1"], extensions: ["hmac-secret", "credProtect"],
    options: ["rk": true, "clientPin": false, "up": true, "credMgmt": true, "Zeta": true],
    pinProtocols: [2, 1], minPINLength: 6, forcePINChange: true, aaguid: "7066391C55CCB6C63C7AEA56973E015C",
    uvRetries: 5, remainingDiscoverableCredentials: 25, firmwareVersion: 328_707, maxMsgSize: 1200)

  /// Every field set, in every nested type.
  static let full = TokenInfo(
    id: "piv-6100000", kind: .piv, name: "YubiKey 5.4.3 \"quoted\" \\ / é\t\u{1}", reader: "Virtual PCD 00 00",
    capabilities: ["piv", "fido2", "hmac-secret"], serial: 6_100_000, version: "5.4.3",
    pin: pin,
    puk: PINStatus(
      kind: .puk, retriesLeft: 0, maxRetries: 3, isDefault: false, isVerified: true, powerCycleRequired: false),
    fido2: info, usbDevice: "usb-1050-0407-6100000", sameDeviceAs: ["fido2-hidraw0"],
    ids: ["piv-6100000", "fido2-hidraw0"], kinds: [.piv, .fido2],
    fido2PIN: PINStatus(kind: .pin, retriesLeft: 5, maxRetries: 8, isDefault: false, powerCycleRequired: true))

  /// The names of the optional fields of `value` (and of the values it holds) that are nil.
  static func nilFields(_ value: Any, path: String = "") -> [String] {
    Mirror(reflecting: value).children.flatMap { child -> [String] in
      let name = path + (child.label ?? "?")
      let inner = Mirror(reflecting: child.value)
      if inner.displayStyle == .optional {
        guard let some = inner.children.first?.value else { return [name] }
        return nilFields(some, path: name + ".")
      }
      return inner.displayStyle == .struct ? nilFields(child.value, path: name + ".") : []
    }
  }

  @Test func theFullValueSetsEveryField() {
    // A field added to TokenInfo, PINStatus or FIDO2Info shows here until `full` sets it (and the writer writes it).
    #expect(Self.nilFields(Self.full) == [])
  }

  @Test func everyFieldIsWrittenAsJSONEncoderWritesIt() throws {
    #expect(TokenInfo.json([Self.full]) == (try Self.reference([Self.full])))
  }

  @Test func nilFieldsAndEmptyCollectionsAsJSONEncoder() throws {
    let bare = TokenInfo(id: "fido2-k", kind: .fido2, name: "", reader: nil, capabilities: [])
    var empty = Self.info
    (empty.versions, empty.extensions, empty.options, empty.pinProtocols) = ([], [], [:], [])
    (empty.uvRetries, empty.remainingDiscoverableCredentials, empty.firmwareVersion, empty.maxMsgSize) =
      (nil, nil, nil, nil)
    var key = bare
    key.fido2 = empty
    key.pin = PINStatus(kind: .pin, retriesLeft: nil)
    for tokens in [[], [bare], [bare, key], [Self.full, key, bare]] {
      #expect(TokenInfo.json(tokens) == (try Self.reference(tokens)))
    }
  }
}
