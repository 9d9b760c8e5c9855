/// UAF TLV tags (FIDO UAF Registry of Predefined Values §3.1; UAF Authenticator Commands §4).
public enum UAFTag {
  public static let regAssertion: UInt16 = 0x3E01
  public static let authAssertion: UInt16 = 0x3E02
  public static let krd: UInt16 = 0x3E03
  public static let signedData: UInt16 = 0x3E04
  public static let attestationCert: UInt16 = 0x2E05
  public static let signature: UInt16 = 0x2E06
  public static let attestationBasicFull: UInt16 = 0x3E07
  public static let attestationBasicSurrogate: UInt16 = 0x3E08
  public static let keyID: UInt16 = 0x2E09
  public static let finalChallengeHash: UInt16 = 0x2E0A
  public static let aaid: UInt16 = 0x2E0B
  public static let publicKey: UInt16 = 0x2E0C
  public static let counters: UInt16 = 0x2E0D
  public static let assertionInfo: UInt16 = 0x2E0E
  public static let authenticatorNonce: UInt16 = 0x2E0F
  public static let transactionContentHash: UInt16 = 0x2E10
  public static let extensionCritical: UInt16 = 0x3E11
  public static let extensionNonCritical: UInt16 = 0x3E12
  public static let extensionID: UInt16 = 0x2E13
  public static let extensionData: UInt16 = 0x2E14

  /// Composite tags (bit 0x1000) hold nested TLVs.
  public static func isComposite(_ tag: UInt16) -> Bool { tag & 0x1000 != 0 }
}

/// Why TLV bytes were refused. Every path ends here: malformed input never traps.
public enum TLVError: Error, Equatable, Sendable {
  /// Fewer than 4 bytes left for a tag and length, at `offset`.
  case truncatedHeader(offset: Int)
  /// `tag` says `declared` bytes, only `available` remain.
  case truncatedValue(tag: UInt16, declared: Int, available: Int)
  /// Input over the size limit.
  case tooLarge(Int)
  /// Nested deeper than the limit.
  case tooDeep
  /// A required element is missing from a composite.
  case missing(tag: UInt16, in: UInt16)
  /// An element has the wrong size or content.
  case invalid(tag: UInt16, reason: String)
  /// The outer element is not the expected one.
  case unexpectedTag(UInt16, expected: UInt16)
}

/// One TLV element; composites carry their parsed children (UAF: tag u16 LE, length u16 LE, value).
public struct TLVElement: Equatable, Sendable {
  public var tag: UInt16
  public var value: [UInt8]
  public var children: [TLVElement]

  /// The element's encoding, header included (what UAF signs for KRD and SIGNED_DATA).
  public var encoded: [UInt8] { UAFTLV.encode(tag, value) }

  /// First child with `tag`.
  public func child(_ tag: UInt16) -> TLVElement? { children.first { $0.tag == tag } }

  public func require(_ tag: UInt16) throws(TLVError) -> TLVElement {
    guard let c = child(tag) else { throw .missing(tag: tag, in: self.tag) }
    return c
  }
}

public enum UAFTLV {
  /// The largest TLV input accepted (a UAF assertion is a few KB; 64 KiB is the u16 length's limit).
  public static let maxInput = 65_539
  static let maxDepth = 8

  public static func encode(_ tag: UInt16, _ value: [UInt8]) -> [UInt8] {
    precondition(value.count <= 0xFFFF, "TLV values are at most 65535 bytes")
    return [UInt8(tag & 0xFF), UInt8(tag >> 8), UInt8(value.count & 0xFF), UInt8(value.count >> 8)] + value
  }

  public static func encode(_ tag: UInt16, children: [[UInt8]]) -> [UInt8] {
    encode(tag, children.flatMap { $0 })
  }

  /// Parses a sequence of elements; composites recursively. Unknown tags are kept (callers skip them).
  public static func parse(_ bytes: [UInt8]) throws(TLVError) -> [TLVElement] {
    guard bytes.count <= maxInput else { throw .tooLarge(bytes.count) }
    return try parse(bytes[...], depth: 0)
  }

  /// Parses exactly one element of the expected tag (trailing bytes are refused).
  public static func parseSingle(_ bytes: [UInt8], expecting tag: UInt16) throws(TLVError) -> TLVElement {
    let elements = try parse(bytes)
    guard let first = elements.first else { throw .truncatedHeader(offset: 0) }
    guard first.tag == tag else { throw .unexpectedTag(first.tag, expected: tag) }
    guard elements.count == 1 else { throw .invalid(tag: tag, reason: "trailing data after the assertion") }
    return first
  }

  static func parse(_ bytes: ArraySlice<UInt8>, depth: Int) throws(TLVError) -> [TLVElement] {
    guard depth < maxDepth else { throw .tooDeep }
    var out: [TLVElement] = []
    var i = bytes.startIndex
    while i < bytes.endIndex {
      guard bytes.endIndex - i >= 4 else { throw .truncatedHeader(offset: i) }
      let tag = UInt16(bytes[i]) | UInt16(bytes[i + 1]) << 8
      let len = Int(bytes[i + 2]) | Int(bytes[i + 3]) << 8
      let start = i + 4
      guard bytes.endIndex - start >= len else {
        throw .truncatedValue(tag: tag, declared: len, available: bytes.endIndex - start)
      }
      let value = bytes[start..<start + len]
      let children = UAFTag.isComposite(tag) ? try parse(value, depth: depth + 1) : []
      out.append(TLVElement(tag: tag, value: Array(value), children: children))
      i = start + len
    }
    return out
  }
}

extension FixedWidthInteger {
  /// Little-endian bytes (UAF numeric fields).
  public var littleEndianBytes: [UInt8] { withUnsafeBytes(of: self.littleEndian) { Array($0) } }

  /// Reads a little-endian value; nil when `bytes` has the wrong size.
  public init?(littleEndianBytes bytes: [UInt8]) {
    guard bytes.count == MemoryLayout<Self>.size else { return nil }
    self = bytes.reversed().reduce(0) { $0 << 8 | Self(truncatingIfNeeded: $1) }  // Int8: 0xFF is -1, no trap
  }
}
