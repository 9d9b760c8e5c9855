import Foundation
import Testing
import UAFCore

@testable import TokenBridge
@testable import TokenDevices

/// Discover's answer is the Client API's DiscoveryData (UAF Application API and Transport Binding v1.1 §3.1.2,
/// Authenticator §3.1.3), with the facts of `AuthenticatorProfile`; and refusals carry the Client API's codes.
@Suite struct DiscoveryDataTests {
  func token(_ kind: TokenKind, id: String, name: String) -> TokenInfo {
    TokenInfo(id: id, kind: kind, name: name, reader: nil, capabilities: [])
  }

  func json(_ data: DiscoveryData) throws -> [String: Any] {
    try #require(JSONSerialization.jsonObject(with: try JSONEncoder().encode(data)) as? [String: Any])
  }

  @Test func hasExactlyTheDictionaryFields() throws {
    let d = AuthenticatorProfile.discoveryData(
      [token(.piv, id: "piv-1", name: "Card"), token(.fido2, id: "fido2-1", name: "Key")],
      configuration: Configuration())
    let top = try json(d)
    #expect(Set(top.keys) == ["supportedUAFVersions", "clientVendor", "clientVersion", "availableAuthenticators"])
    #expect(top["clientVersion"] as? [String: Int] == ["major": 0, "minor": 3])
    let auths = try #require(top["availableAuthenticators"] as? [[String: Any]])
    let required: Set<String> = [
      "title", "aaid", "description", "supportedUAFVersions", "assertionScheme", "authenticationAlgorithm",
      "attestationTypes", "userVerification", "keyProtection", "matcherProtection", "attachmentHint",
      "isSecondFactorOnly", "tcDisplay", "icon", "supportedExtensionIDs",
    ]
    for a in auths {
      #expect(Set(a.keys) == required.union(["tcDisplayContentType"]))
    }
    #expect(auths.map { $0["aaid"] as? String } == ["7B1D#0001", "7B1D#0002"])
  }

  /// A PIV card and a FIDO2 key differ where the tokens differ: key protection (on the card vs derived on the
  /// host) and user verification (PIN vs PIN and touch, both required).
  @Test func kindsDifferWhereTheTokensDo() {
    let c = Configuration()
    let piv = AuthenticatorProfile.discovered(.piv, name: "Card", configuration: c)
    let fido2 = AuthenticatorProfile.discovered(.fido2, name: "Key", configuration: c)
    #expect(piv.keyProtection == 0x2 | 0x8 && fido2.keyProtection == 0x1)
    #expect(piv.userVerification == 0x4 && fido2.userVerification == 0x405)
    #expect(piv.matcherProtection == 0x4 && fido2.matcherProtection == 0x4)
    #expect(piv.tcDisplay == 0x1 && piv.tcDisplayContentType == "text/plain")
    #expect(piv.title == "PIV smart card: Card" && fido2.title == "FIDO2 security key: Key")
    #expect(piv.attestationTypes == [0x3E08])
    var basicFull = c
    basicFull.attestationSlot = "f9"
    #expect(AuthenticatorProfile.discovered(.piv, name: nil, configuration: basicFull).attestationTypes == [0x3E07])
    #expect(AuthenticatorProfile.discovered(.fido2, name: nil, configuration: basicFull).attestationTypes == [0x3E08])
  }

  /// A composite token (one USB device with a PIV card and a FIDO2 key) is two authenticators.
  @Test func aCompositeTokenIsTwoAuthenticators() {
    var t = token(.piv, id: "piv-1", name: "Both")
    t.ids = ["piv-1", "fido2-1"]
    t.kinds = [.piv, .fido2]
    let d = AuthenticatorProfile.discoveryData([t], configuration: Configuration())
    #expect(d.availableAuthenticators.map(\.aaid) == ["7B1D#0001", "7B1D#0002"])
    #expect(t.sides.map(\.id) == ["piv-1", "fido2-1"])
  }
}
