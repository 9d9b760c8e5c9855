import Foundation
import Testing

@testable import TokenBridge

/// Every configuration key is validated; a bad file names the key, the value and what is allowed.
@Suite struct ConfigurationTests {
  func parse(_ json: String) throws(ConfigurationError) -> Configuration {
    try Configuration.parse(Array(json.utf8), path: "/c.json")
  }

  @Test func goodValues() throws {
    let c = try parse(
      #"{"server": "https://rp.example", "networkTimeout": 5, "interactionTimeout": 60, "pivSlots": ["82", "9c"], "#
        + #""fido2ResidentKeys": true, "attestationSlot": null, "pivAAID": "7b1d#0009", "facetID": "https://a.example"}"#
    )
    #expect(c.networkTimeout == 5 && c.pivSlots == ["82", "9c"] && c.fido2ResidentKeys && c.pivAAID == "7b1d#0009")
    #expect(try parse("{}") == Configuration())
    #expect(try parse(#"{"server": "http://127.0.0.1:8080"}"#).server == "http://127.0.0.1:8080")
  }

  @Test func hugeTimeoutIsRefusedNotACrash() {
    #expect(
      throws: ConfigurationError.invalidValue(
        path: "/c.json", key: "networkTimeout", value: "1e+16", allowed: "a number of seconds from 1 to 3600")
    ) { try parse(#"{"networkTimeout": 1e16}"#) }
    let allowed = "a number of seconds from 1 to 86400"
    #expect(
      throws: ConfigurationError.invalidValue(path: "/c.json", key: "interactionTimeout", value: "0", allowed: allowed)
    ) { try parse(#"{"interactionTimeout": 0}"#) }
    #expect(
      throws: ConfigurationError.invalidValue(path: "/c.json", key: "interactionTimeout", value: "-5", allowed: allowed)
    ) { try parse(#"{"interactionTimeout": -5}"#) }
  }

  @Test(arguments: [
    (#"{"networkTimeout": "5"}"#, "networkTimeout"), (#"{"fido2ResidentKeys": 1}"#, "fido2ResidentKeys"),
    (#"{"pivSlots": ["82", "82"]}"#, "pivSlots"), (#"{"pivSlots": ["9b"]}"#, "pivSlots"),
    (#"{"pivSlots": []}"#, "pivSlots"), (#"{"pivAAID": "F1D0#0001"}"#, "pivAAID"),
    (#"{"fido2AAID": "7B1D-0002"}"#, "fido2AAID"), (#"{"server": "http://127.evil.example"}"#, "server"),
    (#"{"server": "ftp://rp.example"}"#, "server"), (#"{"attestationSlot": "zz"}"#, "attestationSlot"),
    (#"{"facetID": ""}"#, "facetID"), (#"{"server": 5}"#, "server"),
  ])
  func badValuesNameTheKey(json: String, key: String) {
    do {
      _ = try parse(json)
      Issue.record("accepted \(json)")
    } catch {
      guard case .invalidValue(_, let k, _, _) = error else {
        Issue.record("\(error)")
        return
      }
      #expect(k == key)
    }
  }

  @Test func unknownKeysAndBrokenFilesAreNamed() {
    #expect(throws: ConfigurationError.unknownKey(path: "/c.json", key: "sever", known: Configuration.knownKeys)) {
      try parse(#"{"sever": "https://rp.example"}"#)
    }
    #expect(throws: ConfigurationError.notJSON(path: "/c.json")) { try parse("[1, 2]") }
    #expect(throws: ConfigurationError.notJSON(path: "/c.json")) { try parse("{") }
    #expect(ErrorReport(ConfigurationError.notJSON(path: "/c.json")).status == .configuration)
  }
}
