import Foundation
import Testing

@testable import TokenBridge
@testable import TokenDevices

/// The JSON documents `--json` prints (`JSONOutput`), as README documents them: field names, absent fields left
/// out (not null), numbers and Booleans as JSON numbers and Booleans, keys in a stable (sorted) order, text
/// from tokens and servers escaped.
@Suite struct JSONOutputTests {
  @Test func aPIVCardAsTokensJSONPrintsIt() {
    let card = TokenInfo(
      id: "piv-6100000", kind: .piv, name: "YubiKey 5.4.3", reader: "Virtual PCD 00 00", capabilities: ["piv"],
      serial: 6_100_000, version: "5.4.3",
      pin: PINStatus(kind: .pin, retriesLeft: 3, maxRetries: 3, isDefault: true, isVerified: false),
      puk: PINStatus(kind: .puk, retriesLeft: nil))
    #expect(
      JSONOutput.text([card]) == """
        [
          {
            "capabilities" : [
              "piv"
            ],
            "id" : "piv-6100000",
            "kind" : "piv",
            "name" : "YubiKey 5.4.3",
            "pin" : {
              "isDefault" : true,
              "isVerified" : false,
              "kind" : "PIN",
              "maxRetries" : 3,
              "retriesLeft" : 3
            },
            "puk" : {
              "isVerified" : false,
              "kind" : "PUK"
            },
            "reader" : "Virtual PCD 00 00",
            "serial" : 6100000,
            "version" : "5.4.3"
          }
        ]
        """)
  }

  @Test func aFIDO2KeyWithItsGetInfo() {
    var key = TokenInfo(id: "fido2-hidraw3", kind: .fido2, name: "Solo", reader: nil, capabilities: ["fido2"])
    key.fido2 = FIDO2Info(
      versions: ["FIDO_2_0"], extensions: [], options: ["rk": true, "clientPin": false], pinProtocols: [2, 1],
      minPINLength: 4, forcePINChange: false, aaguid: "8876631B", uvRetries: nil,
      remainingDiscoverableCredentials: 25, firmwareVersion: nil, maxMsgSize: nil)
    #expect(
      JSONOutput.text([key]) == """
        [
          {
            "capabilities" : [
              "fido2"
            ],
            "fido2" : {
              "aaguid" : "8876631B",
              "extensions" : [

              ],
              "forcePINChange" : false,
              "minPINLength" : 4,
              "options" : {
                "clientPin" : false,
                "rk" : true
              },
              "pinProtocols" : [
                2,
                1
              ],
              "remainingDiscoverableCredentials" : 25,
              "versions" : [
                "FIDO_2_0"
              ]
            },
            "id" : "fido2-hidraw3",
            "kind" : "fido2",
            "name" : "Solo"
          }
        ]
        """)
  }

  @Test func noTokensIsAnEmptyArray() {
    #expect(JSONOutput.text([] as [TokenInfo]) == "[\n\n]")
  }

  /// Every field a token, reader or server can fill in round-trips through a JSON parser: quotes, backslashes,
  /// control characters (C0, DEL), line separators, non-ASCII, and `/` (left as it is: PEM keys and URLs).
  @Test(arguments: [
    #"quote " backslash \ slash / tab \#t nl \#n cr \#r"#, "\u{08}\u{0C}\u{00}\u{01}\u{1F}\u{7F}",
    "é ü 漢字 🙂 \u{2028} \u{2029} \u{FEFF}", "</script>", "\u{10FFFF}", "",
  ])
  func hostileTextIsEscaped(_ text: String) throws {
    let out = JSONOutput.text([Account(username: text, server: "https://rp.example/a/b")])
    #expect(!out.utf8.contains { $0 < 0x20 && $0 != UInt8(ascii: "\n") })  // no raw control byte but the layout's
    #expect(out.contains(#""server" : "https://rp.example/a/b""#))
    let parsed = try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [[String: String]]
    #expect(parsed == [["server": "https://rp.example/a/b", "username": text]])
  }

  @Test func accountsPrintServerAndUsername() {
    let accounts = [Account(username: "alice", server: "https://rp.example"), Account(username: "b\"ob", server: "x")]
    #expect(
      JSONOutput.text(accounts) == """
        [
          {
            "server" : "https://rp.example",
            "username" : "alice"
          },
          {
            "server" : "x",
            "username" : "b\\"ob"
          }
        ]
        """)
  }
}
