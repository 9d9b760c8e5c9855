/// How a virtual card answers where PIV implementations differ: a YubiKey (the default), or a card with
/// nothing but NIST SP 800-73-4 (JavaCard applets, government cards) and the variations such cards show.
public struct PIVCardProfile: Sendable, Equatable {
  /// Answers Yubico's GET VERSION (FD), GET SERIAL (F8), GET METADATA (F7), SET MANAGEMENT KEY (FF),
  /// SET PIN RETRIES (FA) and RESET (FB). Off, each answers 6D00 (ISO 7816-4 §5.6: instruction not supported).
  public var yubicoExtensions = true
  /// The status word for a key slot without a key (GENERAL AUTHENTICATE, GET METADATA); nil: YubiKey's words
  /// (6A80 for GENERAL AUTHENTICATE, 6A82 for GET METADATA). SP 800-73-4 leaves it open; cards use 6A80,
  /// 6A82, 6A86 or 6A88. A data object that is absent is 6A82 in every profile (SP 800-73-4 Part 2 §3.1.2).
  public var emptySlotStatus: UInt16?
  /// The status word GENERAL AUTHENTICATE alone answers for an empty key slot, where it differs from
  /// `emptySlotStatus`: CanoKey's PIV answers 6985 (canokey-core applets/piv/piv.c, `piv_general_authenticate`:
  /// "empty slot after reset", SW_CONDITIONS_NOT_SATISFIED) and 6A82 to GET METADATA.
  public var signEmptySlotStatus: UInt16?
  /// GET METADATA of an empty key slot answers 9000 with no algorithm (tag 01) instead of a status word.
  public var emptyMetadataWithoutAlgorithm = false
  /// PIN tries of a new card (YubiKey: 3; cards in the field have 5, 8, 10 or 15).
  public var pinTries = 3

  public init(
    yubicoExtensions: Bool = true, emptySlotStatus: UInt16? = nil, emptyMetadataWithoutAlgorithm: Bool = false,
    pinTries: Int = 3
  ) {
    self.yubicoExtensions = yubicoExtensions
    self.emptySlotStatus = emptySlotStatus
    self.emptyMetadataWithoutAlgorithm = emptyMetadataWithoutAlgorithm
    self.pinTries = pinTries
  }

  public static let yubikey = PIVCardProfile()
  /// A card without any YubiKey extension, 5 PIN tries, 6A88 for an empty slot.
  public static let generic = PIVCardProfile(yubicoExtensions: false, emptySlotStatus: 0x6A88, pinTries: 5)

  /// The words a card may use for an empty slot (what `--empty-slot-status` takes); 6985 is GENERAL
  /// AUTHENTICATE's only (`signEmptySlotStatus`).
  public static let emptySlotWords: [UInt16] = [0x6A80, 0x6A82, 0x6A86, 0x6A88, 0x6985]

  /// Yubico's instructions, refused when `yubicoExtensions` is off.
  static let yubicoInstructions: Set<UInt8> = [0xFD, 0xF8, 0xF7, 0xFA, 0xFB, 0xFF]

  /// The ATR: YubiKey 5 NFC's, or a plain T=1 JavaCard-like ATR whose historical bytes name no vendor
  /// (so peers do not take the card for a YubiKey).
  public var atr: [UInt8] {
    yubicoExtensions
      ? VirtualPIVCard.atr
      : [0x3B, 0x88, 0x80, 0x01, 0x50, 0x49, 0x56, 0x63, 0x61, 0x72, 0x64, 0x21, 0x73]
  }
}
