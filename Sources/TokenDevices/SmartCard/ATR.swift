/// What an ATR says about the card (ISO/IEC 7816-3 §8.2, 7816-4 §8.1.1.2.7 card capabilities).
public struct ATR: Sendable, Equatable {
  public let bytes: [UInt8]
  public init(_ bytes: [UInt8]) { self.bytes = bytes }

  /// The historical bytes: after TS, T0 and the interface bytes; nil when the ATR is malformed.
  public var historicalBytes: [UInt8]? {
    guard bytes.count >= 2 else { return nil }
    let count = Int(bytes[1] & 0x0F)
    var y = bytes[1] >> 4  // which of TAi, TBi, TCi, TDi follow
    var i = 2
    while true {
      let present = (0..<4).filter { y & (1 << $0) != 0 }.count
      let hasTD = y & 0x08 != 0
      guard i + present <= bytes.count else { return nil }
      let td = hasTD ? bytes[i + present - 1] : nil
      i += present
      guard let td else { break }
      y = td >> 4
    }
    guard i + count <= bytes.count else { return nil }
    return Array(bytes[i..<i + count])
  }

  /// The card says it takes extended Lc/Le: third byte of the card-capabilities object (compact TLV tag 7,
  /// length 3), bit 0x40. YubiKey 5's ATR carries `73 C0 21 C0`.
  public var supportsExtendedLength: Bool {
    guard let h = historicalBytes, h.first == 0x80 else { return false }
    var i = 1
    while i < h.count {
      let tag = h[i] >> 4
      let len = Int(h[i] & 0x0F)
      guard i + 1 + len <= h.count else { return false }
      if tag == 0x7 && len >= 3 { return h[i + 3] & 0x40 != 0 }
      i += 1 + len
    }
    return false
  }
}
