/// Card behaviours that differ between PIV implementations, decided in one place (STYLE.md §6) from what the
/// card itself answered (`CardAnswers`), never from what a YubiKey would answer: every YubiKey extension is
/// optional (HardwareNotes.md, PIV on cards that are not YubiKeys).
public struct TokenQuirks: OptionSet, Sendable {
  public let rawValue: UInt32
  public init(rawValue: UInt32) { self.rawValue = rawValue }

  /// Answered Yubico GET VERSION (00 FD) or GET SERIAL (00 F8).
  public static let yubicoExtensions = TokenQuirks(rawValue: 1 << 0)
  /// Answered Yubico GET METADATA (00 F7) with data: retries without VERIFY, key algorithms, public keys.
  public static let metadata = TokenQuirks(rawValue: 1 << 1)
  /// Took VERIFY with P1=FF (drop the verified state, SP 800-73-4 Part 2 §3.2.1).
  public static let verifyReset = TokenQuirks(rawValue: 1 << 2)
  /// Sends 630x instead of 63Cx for wrong PINs (some non-YubiKey cards; OpenSC has the same flag).
  public static let retriesIn630x = TokenQuirks(rawValue: 1 << 3)
  /// Refused GET METADATA as an instruction it does not know (6D00, 6E00, 6A81, 6B00): not asked again.
  public static let noMetadata = TokenQuirks(rawValue: 1 << 4)
  /// Refused VERIFY P1=FF: a verified PIN cannot be dropped, so its count is not shown while verified.
  public static let noVerifyReset = TokenQuirks(rawValue: 1 << 5)
  /// Answered GET METADATA of an empty key slot with 9000 and no algorithm tag (01).
  public static let emptyMetadataWithoutAlgorithm = TokenQuirks(rawValue: 1 << 6)

  /// Decides from the card's answers; a command not sent yet leaves its quirks undecided (neither the
  /// quirk nor its `no…` counterpart), and the flow that needs it sends it and records the answer.
  public static func derive(_ a: CardAnswers) -> TokenQuirks {
    var q: TokenQuirks = []
    if a.version != nil || a.serial == .supported { q.insert(.yubicoExtensions) }
    switch a.metadata {
    case .supported: q.insert(.metadata)
    case .unsupported: q.insert(.noMetadata)
    case .unknown: break
    }
    switch a.verifyReset {
    case .supported: q.insert(.verifyReset)
    case .unsupported: q.insert(.noVerifyReset)
    case .unknown: break
    }
    if a.retriesIn630x { q.insert(.retriesIn630x) }
    if a.emptyMetadataWithoutAlgorithm { q.insert(.emptyMetadataWithoutAlgorithm) }
    return q
  }

  /// GET METADATA is worth sending: not refused by this card yet.
  public var mayHaveMetadata: Bool { !contains(.noMetadata) }
}

/// What a PIV card answered to the commands that tell how it differs from SP 800-73-4 (kept per session).
public struct CardAnswers: Sendable, Equatable {
  /// An optional command: not sent yet, answered, or refused as unknown to the card.
  public enum Support: Sendable, Equatable {
    case unknown
    case supported
    case unsupported(StatusWord)
  }

  /// GET VERSION's answer (YubiKey firmware version), when the card gave one.
  public var version: [Int]?
  /// GET VERSION was sent (answered or not).
  public var versionAsked = false
  public var serial: Support = .unknown
  /// GET SERIAL's answer (4 bytes, big-endian).
  public var serialNumber: UInt32?
  public var metadata: Support = .unknown
  public var verifyReset: Support = .unknown
  /// A wrong PIN was answered 630x.
  public var retriesIn630x = false
  /// GET METADATA of an empty slot was answered 9000 without an algorithm.
  public var emptyMetadataWithoutAlgorithm = false
  /// The status word the card last used for "no key in this slot" / "no such object".
  public var emptySlotWord: StatusWord?

  public init() {}

  /// Status words with which a card says it does not know an instruction or function (ISO 7816-4 §5.6:
  /// 6D00 INS, 6E00 CLA, 6A81 function, 6B00 wrong parameters outside the command's range).
  public static let notImplemented: Set<StatusWord> = [
    .insNotSupported, .claNotSupported, StatusWord(rawValue: 0x6A81), StatusWord(rawValue: 0x6B00),
  ]

  /// Status words cards use for an empty key slot or an absent data object: 6A82 (SP 800-73-4 Part 2
  /// §3.1.2 "data object not found", YubiKey's GET METADATA), 6A88 (ISO 7816-4 "referenced data not
  /// found"), 6A80 and 6A86 (JavaCard applets that check the slot or tag before its content).
  public static let emptySlot: Set<StatusWord> = [.incorrectData, .fileNotFound, .incorrectP1P2, .referenceNotFound]

  /// Records an answer to an optional command: 9000 → supported, a not-implemented word → unsupported,
  /// anything else leaves it as it was (the command exists; this call failed for another reason).
  static func support(after sw: StatusWord, was: Support) -> Support {
    if sw == .success { return .supported }
    if notImplemented.contains(sw) { return .unsupported(sw) }
    return was
  }
}
