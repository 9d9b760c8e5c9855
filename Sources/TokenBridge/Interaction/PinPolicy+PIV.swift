import TokenDevices
import UAFCore

/// The PIV PIN and PUK policies, as long as PIV reference data (`PIVSession.referenceDataLength`, SP 800-73-4
/// Part 2 §2.4.3).
extension PinPolicy {
  /// PIV application PIN: digits only (SP 800-73-4 Part 2 §2.4.3).
  public static let pivPIN = PinPolicy(lengths: PIVSession.referenceDataLength, digitsOnly: true)
  /// PIV PUK: bytes of any value (YubiKey; NIST's 8 digits fits within it).
  public static let pivPUK = PinPolicy(lengths: PIVSession.referenceDataLength, digitsOnly: false)
}
