import FoundationEssentials
import Testing
import TokenDevices

/// JSONText must write exactly what JSONEncoder writes with the CLI's options (issue 12): compared byte for byte.
@Suite struct JSONTextTests {
  func foundation<T: Encodable>(_ value: T) throws -> String {
    let enc = JSONEncoder()
    enc.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    return String(decoding: try enc.encode(value), as: UTF8.self)
  }

  func same<T: Encodable>(_ value: T, sourceLocation: SourceLocation = #_sourceLocation) throws {
    #expect(try JSONText.encode(value) == foundation(value), sourceLocation: sourceLocation)
  }

  struct Inner: Encodable, Equatable {
    var x: String?
    var y: [String: String] = [:]
    var z: [Int] = []
  }

  struct Outer: Encodable {
    var name = "YubiKey 5.4.3"
    var count = 3
    var negative: Int64 = -9_223_372_036_854_775_808
    var big: UInt64 = 18_446_744_073_709_551_615
    var small: Int8 = -128
    var flag = true
    var off = false
    var absent: String? = nil
    var empty: [String] = []
    var nothing: [String: Int] = [:]
    var nested: [[Int]] = [[], [1, 2], [3]]
    var inner = Inner(x: "a/b", y: ["k": "v", "K": "w", "k10": "x", "k9": "y", "": "z"], z: [1])
    var inners = [Inner(), Inner(x: nil, y: [:], z: [0])]
    var keyed: [Int: String] = [2: "two", 10: "ten"]
  }

  @Test func structuresAsJSONEncoderWritesThem() throws {
    try same(Outer())
    try same([Outer(), Outer()])
    try same([String]())
    try same([String: [Int]]())
    try same(["only": [String: Int]()])
    try same("top-level string")
    try same(42)
    try same(Optional<Int>.none)
    try same([Optional<String>.none, "x"])
    try same(Inner())
  }

  @Test func everyControlCharacterQuoteAndNonASCIIAsJSONEncoderWritesThem() throws {
    var all = ""
    for v in 0..<0x80 { all.unicodeScalars.append(Unicode.Scalar(UInt8(v))) }
    try same(all)
    try same(["key \u{1}\"\\/": "é😀\u{2028}\u{7F}\u{9F}\u{FEFF}"])
  }

  @Test func seededRandomStringsAsJSONEncoderWritesThem() throws {
    var rng = LCG(state: 12)
    let pool: [Unicode.Scalar] = (0..<0x80).map { Unicode.Scalar(UInt8($0)) } + ["é", "😀", "\u{2028}", "\u{202E}", "ß"]
    for _ in 0..<300 {
      var s = ""
      for _ in 0..<Int(rng.next() % 12) { s.unicodeScalars.append(pool[Int(rng.next() % UInt64(pool.count))]) }
      try same([s: s])
    }
  }

  struct EncodesNothing: Encodable { func encode(to encoder: any Encoder) throws {} }
  struct HoldsNothing: Encodable {
    var one = EncodesNothing()
    var many = [EncodesNothing()]
  }

  @Test func aValueThatEncodesNothingIsAnEmptyObjectInsideAndRefusedAtTheTop() throws {
    try same(HoldsNothing())
    #expect(throws: JSONText.Unsupported.nothingEncoded) { try JSONText.encode(EncodesNothing()) }
    // JSONEncoder refuses it too ("Top-level EncodesNothing did not encode any values").
    #expect {
      try foundation(EncodesNothing())
    } throws: { error in
      guard case EncodingError.invalidValue = error else { return false }
      return true
    }
  }

  @Test func floatsAndUnsupportedTypesAreRefused() {
    #expect(throws: JSONText.Unsupported.floatingPoint) { try JSONText.encode(["d": 1.5]) }
    #expect(throws: JSONText.Unsupported.floatingPoint) { try JSONText.encode(Float(2)) }
    #expect(throws: JSONText.Unsupported.listedType) {
      try JSONText.encode(["when": Date(timeIntervalSince1970: 0)], unsupported: [Date.self])
    }
    #expect(throws: JSONText.Unsupported.listedType) { try JSONText.encode([Data([1, 2])], unsupported: [Data.self]) }
  }

  /// Knuth's MMIX linear congruential generator: seeded, so a failing string can be replayed.
  struct LCG {
    var state: UInt64
    mutating func next() -> UInt64 {
      state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
      return state >> 33
    }
  }
}
