/// The FIDO Registry's numbers and the short strings Metadata Statement v3.0 writes for them: the one table that
/// turns the numeric facts of `AuthenticatorProfile` (the UAF 1.1 form, DiscoveryData) into the v3 strings.
///
/// Values: FIDO Registry of Predefined Values v1.1 §3.1 (USER_VERIFY), §3.2 (KEY_PROTECTION), §3.3
/// (MATCHER_PROTECTION), §3.4 (ATTACHMENT_HINT), §3.5 (TRANSACTION_CONFIRMATION_DISPLAY), §3.6.1 (ALG_SIGN), §3.6.2
/// (ALG_KEY); FIDO UAF Registry v1.1 §4.1 (TAG_ATTESTATION_*). Strings: FIDO Metadata Statement v3.0 §3.1 and the
/// FIDO Alliance's registry file (conformance-test-tools-resources `snippets/registry.js`), which also adds the
/// later values marked below (not in UAF 1.1: a 1.1 statement never holds them).
public enum MetadataRegistry {
  public typealias Table = [(value: UInt32, name: String)]

  /// USER_VERIFY_* (§3.1): single methods in `VerificationMethodDescriptor`, bits in DiscoveryData.
  public static let userVerification: Table = [
    (0x0001, "presence_internal"), (0x0002, "fingerprint_internal"), (0x0004, "passcode_internal"),
    (0x0008, "voiceprint_internal"), (0x0010, "faceprint_internal"), (0x0020, "location_internal"),
    (0x0040, "eyeprint_internal"), (0x0080, "pattern_internal"), (0x0100, "handprint_internal"), (0x0200, "none"),
    (0x0400, "all"),
    // Later registry only.
    (0x0800, "passcode_external"), (0x1000, "pattern_external"),
  ]

  /// KEY_PROTECTION_* (§3.2).
  public static let keyProtection: Table = [
    (0x0001, "software"), (0x0002, "hardware"), (0x0004, "tee"), (0x0008, "secure_element"), (0x0010, "remote_handle"),
  ]

  /// MATCHER_PROTECTION_* (§3.3).
  public static let matcherProtection: Table = [(0x0001, "software"), (0x0002, "tee"), (0x0004, "on_chip")]

  /// ATTACHMENT_HINT_* (§3.4).
  public static let attachmentHint: Table = [
    (0x0001, "internal"), (0x0002, "external"), (0x0004, "wired"), (0x0008, "wireless"), (0x0010, "nfc"),
    (0x0020, "bluetooth"), (0x0040, "network"), (0x0080, "ready"), (0x0100, "wifi_direct"),
  ]

  /// TRANSACTION_CONFIRMATION_DISPLAY_* (§3.5).
  public static let tcDisplay: Table = [
    (0x0001, "any"), (0x0002, "privileged_software"), (0x0004, "tee"), (0x0008, "hardware"), (0x0010, "remote"),
  ]

  /// ALG_SIGN_* (§3.6.1).
  public static let authenticationAlgorithm: Table = [
    (0x0001, "secp256r1_ecdsa_sha256_raw"), (0x0002, "secp256r1_ecdsa_sha256_der"), (0x0003, "rsassa_pss_sha256_raw"),
    (0x0004, "rsassa_pss_sha256_der"), (0x0005, "secp256k1_ecdsa_sha256_raw"), (0x0006, "secp256k1_ecdsa_sha256_der"),
    (0x0007, "sm2_sm3_raw"), (0x0008, "rsa_emsa_pkcs1_sha256_raw"), (0x0009, "rsa_emsa_pkcs1_sha256_der"),
    // Later registry only.
    (0x000A, "rsassa_pss_sha384_raw"), (0x000B, "rsassa_pss_sha512_raw"), (0x000C, "rsassa_pkcsv15_sha256_raw"),
    (0x000D, "rsassa_pkcsv15_sha384_raw"), (0x000E, "rsassa_pkcsv15_sha512_raw"), (0x000F, "rsassa_pkcsv15_sha1_raw"),
    (0x0010, "secp384r1_ecdsa_sha384_raw"), (0x0011, "secp521r1_ecdsa_sha512_raw"),
    (0x0012, "ed25519_eddsa_sha512_raw"), (0x0013, "ed448_eddsa_sha512_raw"),
  ]

  /// ALG_KEY_* (§3.6.2).
  public static let publicKeyAlgAndEncoding: Table = [
    (0x0100, "ecc_x962_raw"), (0x0101, "ecc_x962_der"), (0x0102, "rsa_2048_raw"), (0x0103, "rsa_2048_der"),
    // Later registry only.
    (0x0104, "cose"),
  ]

  /// TAG_ATTESTATION_* (UAF Registry §4.1).
  public static let attestationType: Table = [
    (0x3E07, "basic_full"), (0x3E08, "basic_surrogate"), (0x3E09, "ecdaa"),
    // Later registry only.
    (0x3E0A, "attca"), (0x3E0B, "none"), (0x3E0C, "anonca"),
  ]

  /// The string of one value (an algorithm, an encoding, an attestation tag, a single USER_VERIFY method); nil
  /// when the table has none.
  public static func name(_ value: some BinaryInteger, in table: Table) -> String? {
    table.first { UInt64($0.value) == UInt64(value) }?.name
  }

  /// The strings of the bits set in `bits`, in the table's (ascending) order; [] for 0; nil when a bit set has
  /// no string.
  public static func names(_ bits: some BinaryInteger, in table: Table) -> [String]? {
    let value = UInt64(bits)
    let known = table.reduce(UInt64(0)) { $0 | UInt64($1.value) }
    guard value & ~known == 0 else { return nil }
    return table.filter { value & UInt64($0.value) != 0 }.map(\.name)
  }

  /// The value of a string (the reverse of `name`).
  public static func value(_ name: String, in table: Table) -> UInt32? {
    table.first { $0.name == name }?.value
  }
}
