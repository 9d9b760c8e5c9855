import Foundation
import Testing

@testable import TokenBridge

/// What replaced full Foundation in the library gives what Foundation gave, checked against Foundation itself (the
/// tests may link it; the client does not): JSONValue for JSONSerialization, the POSIX errno of a failed desktop
/// entry install, ISO 8601 dates of pending operations.
@Suite struct FoundationReplacementTests {
  func written(_ json: String) throws -> [UInt8] {
    try JSONDecoder().decode(JSONValue.self, from: Data(json.utf8)).serialized
  }

  /// What RawJSON did before: JSONDecoder into Foundation objects (numbers as Double), JSONSerialization out.
  func foundation(_ json: String) throws -> [UInt8] {
    let object = try JSONDecoder().decode(FoundationJSON.self, from: Data(json.utf8)).object
    return Array(try JSONSerialization.data(withJSONObject: object, options: [.fragmentsAllowed]))
  }

  @Test func writesWhatJSONSerializationWrote() throws {
    // One member per object: JSONSerialization's member order was its dictionary's (it varies from run to run).
    let samples = [
      #"{"nma_data":{"redeem_url":"https://rp.example/redeem/authentication"}}"#,
      "[1, 1.0, 1.5, -0.0, 0.1, 1e2, 1e15, 1e16, 1e20, 1e-7, 2.5e-5, 12345678901234567890, 3.14159265358979]",
      #"["a/b\"c\\d\n\t\b\f\r\u0001\u001f\u007f é 😀 \u2028", null, true, false, [], {}]"#,
      #"{"x":[{"y":null}]}"#, "\"only a string\"", "-12", "0",
    ]
    for s in samples {
      #expect(try written(s) == foundation(s), "\(s)")
    }
  }

  @Test func objectMembersAreWrittenInKeyOrder() throws {
    #expect(
      String(decoding: try written(#"{"b":1,"a":{"d":2,"c":3}}"#), as: UTF8.self) == #"{"a":{"c":3,"d":2},"b":1}"#)
  }

  @Test func parsesObjectsOnly() {
    #expect(JSONValue.parseObject(Array(#"{"a":"b"}"#.utf8)) == ["a": .string("b")])
    for notAnObject in ["[1]", "\"s\"", "1", "null", "{", "", "{\"a\":}"] {
      #expect(JSONValue.parseObject(Array(notAnObject.utf8)) == nil, "\(notAnObject)")
    }
  }

  @Test func iso8601FormatStyleWritesWhatISO8601DateFormatterWrote() {
    for ms: Int64 in [0, 1_700_000_000_000, 1_700_000_000_999, 4_102_444_799_500] {
      let date = Date(timeIntervalSince1970: Double(ms) / 1000)
      #expect(date.formatted(.iso8601) == ISO8601DateFormatter().string(from: date))
    }
  }

  @Test func theDesktopEntryInstallReportsThePOSIXError() throws {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("desktop-\(getpid())")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: dir) }
    let file = dir.appendingPathComponent("file")
    try Data("x".utf8).write(to: file)
    let target = file.appendingPathComponent("applications")
    #expect(
      throws: OperationError.input(
        .file(path: target.appendingPathComponent(DesktopHandler.fileName).path, errno: ENOTDIR))
    ) {
      try DesktopHandler(executable: "/usr/bin/tokenbridge").install(into: target)
    }
  }
}

/// The former `AnyJSON` of DeviceWire.swift (the reference for RawJSON's bytes).
private struct FoundationJSON: Decodable {
  var object: Any
  init(from decoder: Decoder) throws {
    let c = try decoder.singleValueContainer()
    if c.decodeNil() {
      object = NSNull()
    } else if let b = try? c.decode(Bool.self) {
      object = b
    } else if let n = try? c.decode(Double.self) {
      object = n
    } else if let s = try? c.decode(String.self) {
      object = s
    } else if let a = try? c.decode([FoundationJSON].self) {
      object = a.map(\.object)
    } else {
      object = try c.decode([String: FoundationJSON].self).mapValues(\.object)
    }
  }
}
