/// An ISO 7816-4 status word (SW1 SW2), kept as a value so unknown codes survive.
public struct StatusWord: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
  public let rawValue: UInt16
  public init(rawValue: UInt16) { self.rawValue = rawValue }
  public init(_ sw1: UInt8, _ sw2: UInt8) { rawValue = UInt16(sw1) << 8 | UInt16(sw2) }

  public var sw1: UInt8 { UInt8(rawValue >> 8) }
  public var sw2: UInt8 { UInt8(rawValue & 0xFF) }

  public static let success = StatusWord(rawValue: 0x9000)
  public static let wrongLength = StatusWord(rawValue: 0x6700)
  public static let securityStatusNotSatisfied = StatusWord(rawValue: 0x6982)
  public static let authenticationMethodBlocked = StatusWord(rawValue: 0x6983)
  public static let conditionsNotSatisfied = StatusWord(rawValue: 0x6985)
  public static let incorrectData = StatusWord(rawValue: 0x6A80)
  public static let fileNotFound = StatusWord(rawValue: 0x6A82)
  public static let notEnoughMemory = StatusWord(rawValue: 0x6A84)
  public static let incorrectP1P2 = StatusWord(rawValue: 0x6A86)
  public static let referenceNotFound = StatusWord(rawValue: 0x6A88)
  public static let insNotSupported = StatusWord(rawValue: 0x6D00)
  public static let claNotSupported = StatusWord(rawValue: 0x6E00)

  /// `61xx`: more response data waiting (xx bytes, 00 = 256 or more).
  public var isMoreDataAvailable: Bool { sw1 == 0x61 }
  /// `63Cx` (and the `630x` some non-YubiKey cards send, see HardwareNotes.md): verification failed, x tries left.
  public var retriesLeft: Int? {
    if sw1 == 0x63 && sw2 & 0xF0 == 0xC0 { return Int(sw2 & 0x0F) }
    return nil
  }

  public var description: String {
    let hex = String(rawValue, radix: 16, uppercase: true)
    return String(repeating: "0", count: 4 - hex.count) + hex
  }
}
