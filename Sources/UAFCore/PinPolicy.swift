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

  public var description: String {
    switch self {
    case .empty: "it is empty"
    case .onlyNumbers: "it may contain digits only"
    case .tooShort(let n): "it is shorter than \(n) characters"
    case .tooLong(let n): "it is longer than \(n) characters"
    case .sameAsOld: "it is the same as the current one"
    }
  }
}

/// A PIN policy for tokens whose PINs are short codes (PIV: 6-8 bytes; NIST SP 800-73-4 Part 2 §2.4.3
/// asks for digits only, a YubiKey takes any byte).
public struct PinPolicy: Sendable, Equatable, Codable {
  public var minLength: Int
  public var maxLength: Int
  public var digitsOnly: Bool

  public init(minLength: Int, maxLength: Int, digitsOnly: Bool) {
    self.minLength = minLength
    self.maxLength = maxLength
    self.digitsOnly = digitsOnly
  }

  /// PIV application PIN: 6-8 digits.
  public static let pivPIN = PinPolicy(minLength: 6, maxLength: 8, digitsOnly: true)
  /// PIV PUK: 6-8 bytes of any value (YubiKey; NIST's 8 digits fits within it).
  public static let pivPUK = PinPolicy(minLength: 6, maxLength: 8, digitsOnly: false)

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
