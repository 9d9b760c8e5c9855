import Platform

/// Data objects (SP 800-73-4 Part 2 §3.1.2 GET DATA, §3.3.1 PUT DATA) and card identity.
extension PIVSession {
  /// Reads a data object's value (inside tag 53); `nil` when absent (6A82).
  public func readObject(_ tag: UInt, sensitive: Bool = false) throws(TokenError) -> [UInt8]? {
    let tagBytes = tag > 0xFFFF ? [UInt8(tag >> 16), UInt8((tag >> 8) & 0xFF), UInt8(tag & 0xFF)] : [UInt8(tag & 0xFF)]
    let r = try transact { () throws(TokenError) in
      try send(APDU(ins: 0xCB, p1: 0x3F, p2: 0xFF, data: BERTLV.encode(0x5C, tagBytes), le: 0, sensitive: sensitive))
    }
    // 6A82 (SP 800-73-4 Part 2 §3.1.2); some cards say 6A80/6A86/6A88 for an object they do not hold.
    if CardAnswers.emptySlot.contains(r.statusWord) {
      answers.emptySlotWord = r.statusWord
      return nil
    }
    try expectSuccess(r, "GET DATA")
    guard let value = BERTLV.find(tag == 0x7E ? 0x7E : 0x53, in: r.data) else {
      throw .malformedResponse(operation: "GET DATA")
    }
    return value
  }

  /// Who the card is: the serial where it answers Yubico GET SERIAL, the CHUID GUID where present, and the
  /// firmware version when `version` is asked for (GET VERSION, once per session: `loadQuirks()`).
  /// GET SERIAL is sent without asking GET VERSION first: a card without it answers 6D00 (INS not supported),
  /// as every ISO 7816-4 card must for an instruction it does not know, and the CHUID names it instead. Once
  /// refused it is not sent again in the session.
  /// `chuid: .whenNoSerial` skips the CHUID read when a serial already identifies the card.
  public func identity(chuid: CHUIDRead = .always, version readVersion: Bool = true) throws(TokenError) -> PIVIdentity {
    try transact { () throws(TokenError) -> PIVIdentity in
      var id = PIVIdentity()
      if readVersion { try loadQuirks() }
      if let v = version { id.version = "\(v.0).\(v.1).\(v.2)" }
      if answers.serial == .unknown {
        let r = try send(APDU(ins: 0xF8, le: 0))
        answers.serial = CardAnswers.support(after: r.statusWord, was: answers.serial)
        if r.statusWord == .success, r.data.count == 4 {
          answers.serialNumber = r.data.reduce(0) { $0 << 8 | UInt32($1) }
        }
      }
      id.serial = answers.serialNumber
      if chuid == .always || id.serial == nil, let chuid = try readObject(0x5FC102),
        let guid = BERTLV.find(0x34, in: chuid)
      {
        id.chuidGUID = Hex.lowercase(guid)
      }
      return id
    }
  }
}

/// Whether `identity()` reads the CHUID.
public enum CHUIDRead: Sendable {
  case always
  case whenNoSerial
}

extension PIVSession {
  /// Writes a data object (PUT DATA, chained when over 255 bytes); needs management-key authentication
  /// in the same transaction. An empty value deletes the object.
  public func writeObject(_ tag: UInt, _ value: [UInt8], sensitive: Bool = false) throws(TokenError) {
    let tagBytes = [UInt8(tag >> 16), UInt8((tag >> 8) & 0xFF), UInt8(tag & 0xFF)]
    let body = BERTLV.encode(0x5C, tagBytes) + BERTLV.encode(0x53, value)
    let r = try transact { () throws(TokenError) in
      try send(APDU(ins: 0xDB, p1: 0x3F, p2: 0xFF, data: body, sensitive: sensitive))
    }
    try expectSuccess(r, "PUT DATA")
  }
}
