#if canImport(Glibc)
  import Glibc
#endif

/// How long a real token takes to answer, per command, so tests and `Tools/bench` see the waits a person with a
/// YubiKey 5 sees (`virtual-token piv|fido2|usbip --latency yubikey5`). The transports sleep for `delay` after the
/// token answered and before the answer goes out (`VPCDLink`, `CCIDFunction`, `CTAPHIDEngine`); the tokens
/// themselves never wait. `none` (the default) adds nothing. Figures and sources: HardwareNotes.md, "Latency
/// profiles".
public struct LatencyProfile: Sendable, Equatable {
  public let name: String
  /// VERIFY (and CHANGE REFERENCE DATA, RESET RETRY COUNTER): the PIN compared, the retry counter written.
  public let pinCheck: Duration
  /// One P-256 scalar multiplication with a private key: an ECDSA signature (PIV GENERAL AUTHENTICATE, FIDO2
  /// assertions and attestations) or an ECDH (clientPIN, hmac-secret).
  public let p256: Duration
  /// A new P-256 key pair, stored (PIV GENERATE ASYMMETRIC KEY PAIR; a FIDO2 credential's key).
  public let p256KeyGeneration: Duration

  /// No delay anywhere: what every test that names no profile gets.
  public static let none = LatencyProfile(name: "none", pinCheck: .zero, p256: .zero, p256KeyGeneration: .zero)

  /// A YubiKey 5 (firmware 5.x, USB).
  /// - pinCheck 9 ms, p256 72 ms: the YubiKey 5 figures (PIV VERIFY ~9 ms, GENERAL AUTHENTICATE with a
  ///   P-256 key ~72 ms); no public measurement with a source was found to refine them (HardwareNotes.md).
  /// - p256KeyGeneration 81 ms: derived, not measured: one scalar multiplication (as a signature, 72 ms) and one
  ///   write to the key's storage (as VERIFY's retry-counter write, 9 ms).
  /// - FIDO2 commands are derived from these (`fido2Delay`): YubiKey 5 runs both applications on one chip.
  public static let yubikey5 = LatencyProfile(
    name: "yubikey5", pinCheck: .milliseconds(9), p256: .milliseconds(72), p256KeyGeneration: .milliseconds(81))

  public static let all: [LatencyProfile] = [.none, .yubikey5]

  public static func named(_ name: String) -> LatencyProfile? { all.first { $0.name == name } }

  /// PIV (SP 800-73-4 Part 2 §3) by INS, for one whole command APDU. A VERIFY without data (PIN status: no PIN
  /// compared, no counter written) takes no modelled time; a chained part (CLA bit 0x10) is only
  /// gathered, and commands not listed (SELECT, GET DATA, PUT DATA, GET RESPONSE, Yubico's GET VERSION, GET
  /// SERIAL, GET METADATA, management-key authentication with 3DES/AES) take no modelled time.
  public func pivDelay(_ apdu: [UInt8]) -> Duration {
    guard apdu.count >= 4, apdu[0] & 0x10 == 0 else { return .zero }
    switch apdu[1] {
    // VERIFY, CHANGE REFERENCE DATA, RESET RETRY COUNTER; a VERIFY without data only reads the tries left.
    case 0x20, 0x24, 0x2C: return apdu.count > 5 ? pinCheck : .zero
    case 0x87: return apdu[2] == 0x11 ? p256 : .zero  // GENERAL AUTHENTICATE, P1 = algorithm (0x11: P-256)
    case 0x47: return Self.generatedAlgorithm(apdu) == 0x11 ? p256KeyGeneration : .zero  // GENERATE ASYMMETRIC
    default: return .zero
    }
  }

  /// The algorithm GENERATE ASYMMETRIC KEY PAIR asks for: `AC L 80 01 alg …` in the data field.
  static func generatedAlgorithm(_ apdu: [UInt8]) -> UInt8? {
    guard apdu.count >= 5 else { return nil }
    let data = Array(apdu[5...])
    guard let i = data.firstIndex(of: 0x80), i + 2 < data.count, data[i + 1] == 0x01 else { return nil }
    return data[i + 2]
  }

  /// FIDO2 by CTAP command (CTAP 2.1 §6), for one CTAPHID_CBOR request (`request`: command byte, then its CBOR).
  /// Derived from the PIV figures, operation by operation:
  /// - makeCredential (0x01), ES256: a new key (`p256KeyGeneration`) and the attestation signature (`p256`).
  /// - getAssertion (0x02) and getNextAssertion (0x08): one signature; with hmac-secret one ECDH more.
  /// - clientPIN (0x06): getKeyAgreement (0x02) one ECDH (the key-agreement key made); setPIN (0x03), changePIN
  ///   (0x04), getPinToken (0x05), getPinUvAuthTokenUsingPinWithPermissions (0x09): one ECDH and the PIN check
  ///   with its counter write (`pinCheck`); getPINRetries (0x01): nothing.
  /// - getInfo, credentialManagement, reset, selection: no modelled time.
  public func fido2Delay(_ request: [UInt8]) -> Duration {
    guard let command = request.first else { return .zero }
    let parameters = { try? CBOR.decode(Array(request.dropFirst())) }
    switch command {
    case 0x01: return p256KeyGeneration + p256
    case 0x02:
      let hmacSecret = parameters()?[int: 4]?[text: "hmac-secret"] != nil
      return hmacSecret ? p256 + p256 : p256
    case 0x08: return p256
    case 0x06:
      switch parameters()?[int: 2]?.int {
      case 0x02: return p256
      case 0x03, 0x04, 0x05, 0x09: return p256 + pinCheck
      default: return .zero
      }
    default: return .zero
    }
  }

  /// Sleeps for `delay` (nothing when it is zero): the token's wait before its answer.
  public static func wait(_ delay: Duration) {
    guard delay > .zero else { return }
    let (seconds, attoseconds) = delay.components
    var left = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
    var rest = timespec()
    while nanosleep(&left, &rest) != 0 && errno == EINTR { left = rest }
  }
}
