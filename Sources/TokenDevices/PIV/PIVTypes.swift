/// A PIV key reference (SP 800-73-4 Part 1 Table 4b); retired slots 82-95 included.
public struct PIVSlot: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
  public let rawValue: UInt8
  public init(rawValue: UInt8) { self.rawValue = rawValue }

  public static let authentication = PIVSlot(rawValue: 0x9A)
  public static let signature = PIVSlot(rawValue: 0x9C)
  public static let keyManagement = PIVSlot(rawValue: 0x9D)
  public static let cardAuthentication = PIVSlot(rawValue: 0x9E)
  public static let retired = (0x82...0x95).map { PIVSlot(rawValue: UInt8($0)) }
  public static let all = [authentication, signature, keyManagement, cardAuthentication] + retired

  /// Parses `9a`, `0x9A`, `82`, or a name (`authentication`, `signature`, `key-management`, `card-authentication`).
  public init?(string: String) {
    let s = string.lowercased()
    switch s {
    case "authentication": self = .authentication
    case "signature": self = .signature
    case "key-management": self = .keyManagement
    case "card-authentication": self = .cardAuthentication
    default:
      let hex = s.hasPrefix("0x") ? String(s.dropFirst(2)) : s
      guard let v = UInt8(hex, radix: 16), PIVSlot.all.contains(PIVSlot(rawValue: v)) else { return nil }
      self.rawValue = v
    }
  }

  /// The certificate data object of this slot (SP 800-73-4 Part 1 Table 3).
  public var certificateObject: UInt {
    switch rawValue {
    case 0x9A: 0x5FC105
    case 0x9C: 0x5FC10A
    case 0x9D: 0x5FC10B
    case 0x9E: 0x5FC101
    default: 0x5FC10D + UInt(rawValue - 0x82)
    }
  }

  public var description: String {
    let h = String(rawValue, radix: 16, uppercase: true)
    return h
  }
}

/// Algorithm identifiers (SP 800-78-4 Table 6-2).
public enum PIVKeyAlgorithm: UInt8, Sendable, Codable {
  case eccP256 = 0x11
  case eccP384 = 0x14
  case rsa1024 = 0x06
  case rsa2048 = 0x07
}

/// Management-key (9B) ciphers: 3DES up to YubiKey 5.6, AES-192 default from 5.7.
public enum ManagementKeyAlgorithm: UInt8, Sendable, Codable, CustomStringConvertible {
  case tripleDES = 0x03
  case aes128 = 0x08
  case aes192 = 0x0A
  case aes256 = 0x0C

  public var keyLength: Int {
    switch self {
    case .tripleDES, .aes192: 24
    case .aes128: 16
    case .aes256: 32
    }
  }
  public var blockSize: Int { self == .tripleDES ? 8 : 16 }
  public var description: String {
    switch self {
    case .tripleDES: "3DES"
    case .aes128: "AES-128"
    case .aes192: "AES-192"
    case .aes256: "AES-256"
    }
  }
}

/// Where the management key comes from.
public enum ManagementKeySource: Sendable {
  /// The manufacturer default (`0102…08` ×3).
  case defaultKey
  /// Given explicitly (read from a file descriptor by the CLI).
  case key([UInt8])
  /// yubikey-manager's PIN-protected key, stored in 5FC109 (read after VERIFY).
  case pinProtected

  public static let defaultKeyBytes: [UInt8] = Array([1, 2, 3, 4, 5, 6, 7, 8].repeated(3))
}

extension Array {
  fileprivate func repeated(_ n: Int) -> [Element] { (0..<n).flatMap { _ in self } }
}

/// What the card tells about itself.
public struct PIVIdentity: Sendable, Equatable, Codable {
  /// YubiKey firmware version, when the card answers GET VERSION.
  public var version: String?
  /// Serial number (YubiKey GET SERIAL).
  public var serial: UInt32?
  /// CHUID card GUID (tag 34), hex, when the card has a CHUID.
  public var chuidGUID: String?
}

/// Per-slot facts from YubiKey GET METADATA (5.3+).
public struct PIVSlotMetadata: Sendable, Equatable {
  public var algorithm: UInt8
  public var pinPolicy: UInt8?
  public var touchPolicy: UInt8?
  public var generatedOnCard: Bool?
  public var publicKey: [UInt8]?
}
