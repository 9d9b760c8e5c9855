import Platform

/// PIN and PUK management: SP 800-73-4 Part 2 §3.2.1 VERIFY, §3.2.2 CHANGE REFERENCE DATA,
/// §3.2.3 RESET RETRY COUNTER; retries read from YubiKey GET METADATA where the card answers it.
extension PIVSession {
  /// PIV reference data (PIN and PUK) is 6 to 8 bytes (SP 800-73-4 Part 2 §2.4.3; YubiKeys take 6–8 for the
  /// PUK too: HardwareNotes.md, PIV). A value outside it is refused here, before any APDU, so it costs no try.
  /// The one definition of the PIV PIN and PUK lengths: the client's policies (`PinPolicy.pivPIN`, `.pivPUK`) and
  /// the check of a current value before it is sent are made from it.
  public static let referenceDataLength = 6...8

  /// Throws `.pinFormat` when `value` is not PIV reference data (nothing is sent).
  static func checkFormat(_ value: [UInt8], _ kind: PINKind) throws(TokenError) {
    guard value.count >= referenceDataLength.lowerBound else {
      throw .pinFormat(kind, .tooShort(minimum: referenceDataLength.lowerBound))
    }
    guard value.count <= referenceDataLength.upperBound else {
      throw .pinFormat(kind, .tooLong(maximum: referenceDataLength.upperBound))
    }
  }

  /// Pads a PIN/PUK with FF to the reference data's full length (8 bytes). Throws `.pinFormat` (nothing sent)
  /// outside `referenceDataLength`.
  static func padded(_ value: [UInt8], _ kind: PINKind) throws(TokenError) -> [UInt8] {
    try checkFormat(value, kind)
    return value + [UInt8](repeating: 0xFF, count: referenceDataLength.upperBound - value.count)
  }

  static func reference(_ kind: PINKind) -> UInt8 { kind == .pin ? 0x80 : 0x81 }

  /// Reads the PIN or PUK state without spending a try: GET METADATA (1 APDU) where the card answers it, else an
  /// empty VERIFY (after VERIFY P1=FF where the card takes it, so an already verified PIN still shows its count).
  /// `detailed: false` asks only for the tries left (all a PIN attempt needs): for the PIN that is the empty
  /// VERIFY of SP 800-73-4 §3.2.1 (63Cx), which every PIV card answers; `detailed: true` also wants the maximum
  /// and whether the value is still the default, which only GET METADATA tells. The PUK has no empty VERIFY
  /// (§3.2.3 has no status form), so it is always asked through GET METADATA, and is unknown (`retriesLeft`
  /// nil) on a card without it. Whether GET METADATA exists is decided by the card's answer to it (6D00 and
  /// the like: `CardAnswers.notImplemented`), never by a version number.
  /// Within one transaction the state is read once: later calls get it from memory until a command that may
  /// change it (VERIFY, CHANGE REFERENCE DATA, …) is sent; a wrong value's 63Cx answer gives the new count.
  public func pinStatus(_ kind: PINKind, detailed: Bool = true) throws(TokenError) -> PINStatus {
    try transact { () throws(TokenError) -> PINStatus in
      if let known = pinCache[kind], known.detailed || !detailed { return known.status }
      let metadata =
        quirks.contains(.metadata) || ((detailed || kind == .puk) && quirks.mayHaveMetadata)
      let status = try readPINStatus(kind, metadata: metadata)
      pinCache[kind] = CachedPIN(status: status, detailed: detailed || kind == .puk || status.maxRetries != nil)
      return status
    }
  }

  func readPINStatus(_ kind: PINKind, metadata: Bool) throws(TokenError) -> PINStatus {
    if metadata {
      let r = try send(APDU(ins: 0xF7, p2: Self.reference(kind), le: 0))
      answers.metadata = CardAnswers.support(after: r.statusWord, was: answers.metadata)
      if r.statusWord == .success, let tlvs = BERTLV.parse(r.data),
        let retries = tlvs.first(where: { $0.tag == 0x06 })?.value, retries.count == 2
      {
        let isDefault = tlvs.first { $0.tag == 0x05 }?.value.first.map { $0 == 1 }
        return PINStatus(
          kind: kind, retriesLeft: Int(retries[1]), maxRetries: Int(retries[0]), isDefault: isDefault)
      }
      // Refused, or an answer without the tries (tag 06): the standard way below.
    }
    guard kind == .pin else { return PINStatus(kind: .puk, retriesLeft: nil) }
    var verified = false
    var r = try send(APDU(ins: 0x20, p2: 0x80))
    if r.statusWord == .success {
      verified = true
      if !quirks.contains(.noVerifyReset) {
        let reset = try send(APDU(ins: 0x20, p1: 0xFF, p2: 0x80))
        answers.verifyReset = reset.statusWord == .success ? .supported : .unsupported(reset.statusWord)
        if reset.statusWord == .success {
          r = try send(APDU(ins: 0x20, p2: 0x80))
          verified = false
        }
      }
    }
    if let left = retries(r.statusWord) { return PINStatus(kind: .pin, retriesLeft: left) }
    if r.statusWord == .authenticationMethodBlocked { return PINStatus(kind: .pin, retriesLeft: 0) }
    if r.statusWord == .success { return PINStatus(kind: .pin, retriesLeft: nil, isVerified: verified) }
    throw .unexpectedStatus(r.statusWord, operation: "VERIFY (status)")
  }

  /// Verifies the PIN. Throws `.wrongPIN(retriesLeft:)` or `.pinBlocked`.
  public func verifyPIN(_ pin: [UInt8]) throws(TokenError) {
    var data = try Self.padded(pin, .pin)
    defer { wipe(&data) }
    let before = pinCache[.pin]?.status
    let r = try transact { () throws(TokenError) in try send(APDU(ins: 0x20, p2: 0x80, data: data, sensitive: true)) }
    try checkPINResult(r, .pin, "VERIFY", before: before)
  }

  /// CHANGE REFERENCE DATA for the PIN or the PUK: one APDU.
  /// Both values are checked (old first) before anything is sent.
  public func changeReference(_ kind: PINKind, old: [UInt8], new: [UInt8]) throws(TokenError) {
    try Self.checkFormat(old, kind)
    try Self.checkFormat(new, kind)
    var data = try Self.padded(old, kind) + Self.padded(new, kind)
    defer { wipe(&data) }
    let before = pinCache[kind]?.status
    let r = try transact { () throws(TokenError) in
      try send(APDU(ins: 0x24, p2: Self.reference(kind), data: data, sensitive: true))
    }
    try checkPINResult(r, kind, "CHANGE REFERENCE DATA", before: before)
  }

  /// RESET RETRY COUNTER: unblocks the PIN with the PUK and sets a new PIN. A wrong PUK spends a PUK try.
  /// Both values are checked (PUK first) before anything is sent.
  public func unblockPIN(puk: [UInt8], newPIN: [UInt8]) throws(TokenError) {
    try Self.checkFormat(puk, .puk)
    try Self.checkFormat(newPIN, .pin)
    var data = try Self.padded(puk, .puk) + Self.padded(newPIN, .pin)
    defer { wipe(&data) }
    let before = pinCache[.puk]?.status
    let r = try transact { () throws(TokenError) in
      try send(APDU(ins: 0x2C, p2: 0x80, data: data, sensitive: true))
    }
    try checkPINResult(r, .puk, "RESET RETRY COUNTER", before: before)
  }

  func retries(_ sw: StatusWord) -> Int? {
    if let n = sw.retriesLeft { return n }
    if quirks.contains(.retriesIn630x), sw.sw1 == 0x63, sw.sw2 <= 0x0F { return Int(sw.sw2) }
    return nil
  }

  /// Maps a PIN command's answer. A wrong value's answer carries the tries left: while the card is held
  /// that count is remembered (with what `before` knew of the maximum), so the next `pinStatus` costs nothing.
  func checkPINResult(_ r: APDUResponse, _ kind: PINKind, _ operation: String, before: PINStatus? = nil)
    throws(TokenError)
  {
    if r.statusWord == .success {
      card.transport.resetOnClose = true  // the PIN may now be verified on the card
      return
    }
    if let left = retries(r.statusWord) {
      if transactionDepth > 0 || cardHeld {
        pinCache[kind] = CachedPIN(
          status: PINStatus(
            kind: kind, retriesLeft: left, maxRetries: before?.maxRetries, isDefault: before?.isDefault),
          detailed: before?.maxRetries != nil)
      }
      if left == 0 { throw .pinBlocked(kind) }
      throw .wrongPIN(kind, retriesLeft: left)
    }
    switch r.statusWord {
    case .authenticationMethodBlocked: throw .pinBlocked(kind)
    case .incorrectData, .wrongLength: throw .pinFormat(kind, .refusedByToken(r.statusWord))
    default: throw .unexpectedStatus(r.statusWord, operation: operation)
    }
  }
}
