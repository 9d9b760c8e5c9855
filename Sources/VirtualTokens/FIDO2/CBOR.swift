/// The CBOR subset CTAP2 uses (RFC 8949; CTAP 2.1 §8 canonical form): integers, byte and text strings,
/// arrays, maps, booleans, null. Decoding refuses anything else and nests at most 16 deep; never traps.
///
/// Why not libcbor: its C API (item refcounts, builders) costs more glue than these ~150 lines, and
/// CTAP2's canonical-order rule must be enforced by hand there too.
public indirect enum CBOR: Hashable, Sendable {
  case unsigned(UInt64)
  /// -1 - n
  case negative(UInt64)
  case bytes([UInt8])
  case text(String)
  case array([CBOR])
  case map([CBORPair])
  case bool(Bool)
  case null

  public static func int(_ v: Int) -> CBOR { v >= 0 ? .unsigned(UInt64(v)) : .negative(UInt64(-1 - v)) }

  public var int: Int? {
    switch self {
    case .unsigned(let u): u <= UInt64(Int.max) ? Int(u) : nil
    case .negative(let n): n < UInt64(Int.max) ? -1 - Int(n) : nil
    default: nil
    }
  }
  public var bytes: [UInt8]? { if case .bytes(let b) = self { b } else { nil } }
  public var text: String? { if case .text(let t) = self { t } else { nil } }
  public var bool: Bool? { if case .bool(let b) = self { b } else { nil } }
  public var array: [CBOR]? { if case .array(let a) = self { a } else { nil } }
  public var pairs: [CBORPair]? { if case .map(let m) = self { m } else { nil } }

  /// Value for an integer or text key of a map.
  public subscript(key: CBOR) -> CBOR? { pairs?.first { $0.key == key }?.value }
  public subscript(int key: Int) -> CBOR? { self[.int(key)] }
  public subscript(text key: String) -> CBOR? { self[.text(key)] }

  public func encoded() -> [UInt8] {
    switch self {
    case .unsigned(let u): return Self.head(0, u)
    case .negative(let n): return Self.head(1, n)
    case .bytes(let b): return Self.head(2, UInt64(b.count)) + b
    case .text(let t): return Self.head(3, UInt64(t.utf8.count)) + Array(t.utf8)
    case .array(let a): return Self.head(4, UInt64(a.count)) + a.flatMap { $0.encoded() }
    case .map(let m):
      // Canonical: keys sorted by encoded length, then bytewise.
      let sorted = m.map { ($0.key.encoded(), $0.value) }.sorted { a, b in
        a.0.count != b.0.count ? a.0.count < b.0.count : a.0.lexicographicallyPrecedes(b.0)
      }
      return Self.head(5, UInt64(m.count)) + sorted.flatMap { $0.0 + $0.1.encoded() }
    case .bool(let b): return [b ? 0xF5 : 0xF4]
    case .null: return [0xF6]
    }
  }

  static func head(_ major: UInt8, _ v: UInt64) -> [UInt8] {
    let m = major << 5
    switch v {
    case 0..<24: return [m | UInt8(v)]
    case 24..<0x100: return [m | 24, UInt8(v)]
    case 0x100..<0x10000: return [m | 25, UInt8(v >> 8), UInt8(v & 0xFF)]
    case 0x10000..<0x1_0000_0000: return [m | 26] + (0..<4).reversed().map { UInt8((v >> (8 * $0)) & 0xFF) }
    default: return [m | 27] + (0..<8).reversed().map { UInt8((v >> (8 * $0)) & 0xFF) }
    }
  }

  public enum DecodeError: Error, Equatable, Sendable {
    case truncated
    case unsupported(UInt8)
    case tooDeep
    case trailingBytes
    case invalidText
  }

  /// Decodes exactly one item.
  public static func decode(_ bytes: [UInt8]) throws(DecodeError) -> CBOR {
    var i = 0
    let item = try decode(bytes, &i, depth: 0)
    guard i == bytes.count else { throw .trailingBytes }
    return item
  }

  static func decode(_ b: [UInt8], _ i: inout Int, depth: Int) throws(DecodeError) -> CBOR {
    guard depth < 16 else { throw .tooDeep }
    guard i < b.count else { throw .truncated }
    let first = b[i]
    i += 1
    let major = first >> 5
    let info = first & 0x1F
    if major == 7 {
      switch info {
      case 20: return .bool(false)
      case 21: return .bool(true)
      case 22: return .null
      default: throw .unsupported(first)
      }
    }
    let v: UInt64
    switch info {
    case 0..<24: v = UInt64(info)
    case 24...27:
      let n = 1 << Int(info - 24)
      guard i + n <= b.count else { throw .truncated }
      v = b[i..<i + n].reduce(0) { $0 << 8 | UInt64($1) }
      i += n
    default: throw .unsupported(first)
    }
    switch major {
    case 0: return .unsigned(v)
    case 1: return .negative(v)
    case 2, 3:
      guard v <= UInt64(b.count - i) else { throw .truncated }
      let s = Array(b[i..<i + Int(v)])
      i += Int(v)
      if major == 2 { return .bytes(s) }
      guard let t = String(validating: s, as: UTF8.self) else { throw .invalidText }
      return .text(t)
    case 4:
      guard v <= UInt64(b.count - i) else { throw .truncated }  // each item takes at least one byte
      var a: [CBOR] = []
      for _ in 0..<Int(v) { a.append(try decode(b, &i, depth: depth + 1)) }
      return .array(a)
    case 5:
      guard v <= UInt64(b.count - i) / 2 else { throw .truncated }
      var m: [CBORPair] = []
      for _ in 0..<Int(v) {
        let k = try decode(b, &i, depth: depth + 1)
        m.append(CBORPair(key: k, value: try decode(b, &i, depth: depth + 1)))
      }
      return .map(m)
    default: throw .unsupported(first)
    }
  }
}

public struct CBORPair: Hashable, Sendable {
  public var key: CBOR
  public var value: CBOR
  public init(key: CBOR, value: CBOR) {
    self.key = key
    self.value = value
  }
}

extension CBOR {
  /// A map from (key, value) pairs.
  public static func map(_ pairs: (CBOR, CBOR)...) -> CBOR { .map(pairs.map { CBORPair(key: $0.0, value: $0.1) }) }
}
