import FoundationEssentials

/// Why a new PIN (or PUK) is refused before anything is sent to a token: the validation results the
/// mobile SDKs show (empty, onlyNumbers, tooShort, tooLong, sameAsOld).
public enum PinValidationError: Error, Equatable, Sendable, CustomStringConvertible {
  case empty
  /// The policy allows digits only and the value has something else.
  case onlyNumbers
  case tooShort(minimum: Int)
  case tooLong(maximum: Int)
  /// The new value equals the old one.
  case sameAsOld
  /// A password that is not UTF-8.
  case notUTF8
  /// The token itself refused the value's format (e.g. a PIV card answering 6A80); no try was spent.
  case refusedByToken

  public var description: String {
    switch self {
    case .empty: "it is empty"
    case .onlyNumbers: "it may contain digits only"
    case .tooShort(let n): "it is shorter than \(n) characters"
    case .tooLong(let n): "it is longer than \(n) characters"
    case .sameAsOld: "it is the same as the current one"
    case .notUTF8: "it is not UTF-8 text"
    case .refusedByToken: "the token does not accept a value of this form"
    }
  }
}

/// A PIN policy for tokens whose PINs are short codes (PIV's: `PinPolicy.pivPIN` and `.pivPUK` in TokenBridge, from
/// the reference-data length the device layer pads to).
public struct PinPolicy: Sendable, Equatable, Codable {
  public var minLength: Int
  public var maxLength: Int
  public var digitsOnly: Bool

  public init(minLength: Int, maxLength: Int, digitsOnly: Bool) {
    self.minLength = minLength
    self.maxLength = maxLength
    self.digitsOnly = digitsOnly
  }

  /// A policy for values of `lengths` bytes.
  public init(lengths: ClosedRange<Int>, digitsOnly: Bool) {
    self.init(minLength: lengths.lowerBound, maxLength: lengths.upperBound, digitsOnly: digitsOnly)
  }

  /// Checks a new value (and that it differs from `old`, when given). The first failure wins, in the order
  /// empty, onlyNumbers, tooShort, tooLong, sameAsOld.
  public func validate(new: [UInt8], old: [UInt8]? = nil) -> PinValidationError? {
    if new.isEmpty { return .empty }
    if digitsOnly && !new.allSatisfy({ (0x30...0x39).contains($0) }) { return .onlyNumbers }
    if new.count < minLength { return .tooShort(minimum: minLength) }
    if new.count > maxLength { return .tooLong(maximum: maxLength) }
    if let old, old == new { return .sameAsOld }
    return nil
  }
}

/// What a new PIN or password is checked against before anything is sent.
public protocol CredentialPolicy: Sendable {
  func validate(new: [UInt8], old: [UInt8]?) -> PinValidationError?
  /// For prompts: "6-8 digits", "4-63 characters".
  var summary: String { get }
}

extension PinPolicy: CredentialPolicy {
  public var summary: String { "\(minLength)-\(maxLength) \(digitsOnly ? "digits" : "characters")" }
}

/// FIDO2 PINs are passwords (CTAP 2.1 §6.5.1): UTF-8 after NFC normalisation, at least max(4, minPINLength)
/// code points, at most 63 bytes.
public struct PasswordPolicy: CredentialPolicy, Equatable {
  public var minCodePoints: Int
  public static let maxBytes = 63

  public init(minPINLength: Int) { minCodePoints = max(4, minPINLength) }

  public var summary: String { "\(minCodePoints) or more characters, at most \(Self.maxBytes) bytes" }

  /// NFC-normalised UTF-8 bytes of a typed password; nil when the bytes are not UTF-8.
  public static func normalized(_ bytes: [UInt8]) -> [UInt8]? {
    guard let s = String(validating: bytes, as: UTF8.self) else { return nil }
    return s._nfcCodeUnits  // the standard library's NFC (Foundation's used ICU)
  }

  public func validate(new: [UInt8], old: [UInt8]?) -> PinValidationError? {
    if new.isEmpty { return .empty }
    guard let n = Self.normalized(new), let s = String(validating: n, as: UTF8.self) else { return .notUTF8 }
    if s.unicodeScalars.count < minCodePoints { return .tooShort(minimum: minCodePoints) }
    if n.count > Self.maxBytes { return .tooLong(maximum: Self.maxBytes) }
    if let old, Self.normalized(old) == n { return .sameAsOld }
    return nil
  }
}
