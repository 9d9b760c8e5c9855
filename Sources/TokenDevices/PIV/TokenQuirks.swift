/// Card behaviours that differ between PIV implementations, decided in one place (STYLE.md §6).
public struct TokenQuirks: OptionSet, Sendable {
  public let rawValue: UInt32
  public init(rawValue: UInt32) { self.rawValue = rawValue }

  /// Answers Yubico GET VERSION (00 FD) and GET SERIAL (00 F8).
  public static let yubicoExtensions = TokenQuirks(rawValue: 1 << 0)
  /// Answers GET METADATA (00 F7), YubiKey 5.3+: retries without VERIFY, key algorithms, public keys.
  public static let metadata = TokenQuirks(rawValue: 1 << 1)
  /// Takes VERIFY with P1=FF to drop the verified state (YubiKey 5.4.3+, SP 800-73-4).
  public static let verifyReset = TokenQuirks(rawValue: 1 << 2)
  /// Sends 630x instead of 63Cx for wrong PINs (some non-YubiKey cards; OpenSC has the same flag).
  public static let retriesIn630x = TokenQuirks(rawValue: 1 << 3)

  /// Decides from GET VERSION's answer (nil when the card does not know the command).
  public static func derive(atr: [UInt8], version: (Int, Int, Int)?) -> TokenQuirks {
    var q: TokenQuirks = []
    guard let (major, minor, patch) = version else { return q }
    q.insert(.yubicoExtensions)
    let v = major * 10000 + minor * 100 + patch
    if v >= 5_03_00 { q.insert(.metadata) }
    if v >= 5_04_03 { q.insert(.verifyReset) }
    return q
  }
}
