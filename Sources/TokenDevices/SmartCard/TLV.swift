/// BER-TLV as PIV uses it (SP 800-73-4 Part 2 §3.3): 1- or 2-byte tags, lengths in 1-3 bytes.
public enum BERTLV {
  public static func encode(_ tag: UInt, _ value: [UInt8]) -> [UInt8] {
    var out: [UInt8] = []
    if tag > 0xFFFF {
      out += [UInt8(tag >> 16), UInt8((tag >> 8) & 0xFF), UInt8(tag & 0xFF)]
    } else if tag > 0xFF {
      out += [UInt8(tag >> 8), UInt8(tag & 0xFF)]
    } else {
      out.append(UInt8(tag))
    }
    out += encodeLength(value.count)
    return out + value
  }

  public static func encodeLength(_ n: Int) -> [UInt8] {
    if n < 0x80 { return [UInt8(n)] }
    if n <= 0xFF { return [0x81, UInt8(n)] }
    return [0x82, UInt8(n >> 8), UInt8(n & 0xFF)]
  }

  /// Parses a flat sequence of TLVs; `nil` if the input is truncated or malformed.
  public static func parse(_ bytes: [UInt8]) -> [(tag: UInt, value: [UInt8])]? {
    var out: [(UInt, [UInt8])] = []
    var i = 0
    while i < bytes.count {
      var tag = UInt(bytes[i])
      if bytes[i] & 0x1F == 0x1F {  // multi-byte tag: at most 3 bytes (PIV's longest, 5FC1xx; more would overflow)
        var tagBytes = 1
        repeat {
          i += 1
          tagBytes += 1
          guard i < bytes.count, tagBytes <= 3 else { return nil }
          tag = tag << 8 | UInt(bytes[i])
        } while bytes[i] & 0x80 != 0
      }
      i += 1
      guard i < bytes.count else { return nil }
      var len = Int(bytes[i])
      i += 1
      if len & 0x80 != 0 {
        let n = len & 0x7F
        guard n >= 1, n <= 3, i + n <= bytes.count else { return nil }
        len = 0
        for _ in 0..<n {
          len = len << 8 | Int(bytes[i])
          i += 1
        }
      }
      guard i + len <= bytes.count else { return nil }
      out.append((tag, Array(bytes[i..<i + len])))
      i += len
    }
    return out
  }

  /// The value of the first TLV with `tag`, or `nil`.
  public static func find(_ tag: UInt, in bytes: [UInt8]) -> [UInt8]? {
    parse(bytes)?.first { $0.tag == tag }?.value
  }
}
