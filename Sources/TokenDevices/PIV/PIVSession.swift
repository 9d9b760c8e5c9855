/// Speaks the PIV application (NIST SP 800-73-4 Part 2) over one card connection.
///
/// Every public operation runs inside one PC/SC transaction that starts with SELECT, so another process
/// between two operations cannot leave the card in another application; a second process waits for the
/// transaction (`SCardBeginTransaction`) and then proceeds.
///
/// With `holdsCard` set (one command's session, see `TokenDiscovery.holdCards`) the first transaction is kept
/// until `releaseCard()` or the end of the session: the command SELECTs once, and what it read stays exact
/// (no other process can send an APDU meanwhile), so the PIN tries read once serve every later check until a
/// PIN command changes them (HardwareNotes.md, PIV round trips).
public final class PIVSession {
  /// The PIV AID; cards match right-truncated AIDs (SP 800-73-4 Part 2 §3.1.1).
  public static let aid: [UInt8] = [0xA0, 0x00, 0x00, 0x03, 0x08, 0x00, 0x00, 0x10, 0x00, 0x01, 0x00]

  public let card: SmartCardProtocol
  /// What the card answered so far to the commands that tell how it differs from the standard (GET VERSION,
  /// GET SERIAL, GET METADATA, VERIFY P1=FF, empty-slot words): kept for the session, the facts behind `quirks`.
  public internal(set) var answers = CardAnswers()
  /// The quirks known so far, derived in one place from `answers` (`TokenQuirks.derive`).
  public var quirks: TokenQuirks { TokenQuirks.derive(answers) }
  /// YubiKey firmware version, when the card answered GET VERSION (read by `loadQuirks()`).
  public var version: (Int, Int, Int)? { answers.version.map { ($0[0], $0[1], $0[2]) } }
  var reader: String { card.transport.reader }
  var transactionDepth = 0

  /// Keep the first transaction until `releaseCard()` (or the end of the session) instead of ending it with
  /// each operation.
  public var holdsCard = false
  /// The transaction is begun and kept (`holdsCard`).
  var cardHeld = false
  /// PIN/PUK state read in the current transaction; valid only while no other process can reach the card and
  /// cleared by any command that may change it (see `send`).
  var pinCache = PINCache()

  /// A PIN/PUK state read in the held transaction, and whether it holds the details (maximum, default).
  struct CachedPIN {
    var status: PINStatus
    var detailed: Bool
  }

  /// The PIN's and the PUK's cached state. Two fields, not a `[PINKind: CachedPIN]`: a dictionary's first use
  /// instantiates its generic metadata and hashing witnesses (docs/performance.md).
  struct PINCache {
    var pin: CachedPIN?
    var puk: CachedPIN?

    subscript(kind: PINKind) -> CachedPIN? {
      get { kind == .pin ? pin : puk }
      set { if kind == .pin { pin = newValue } else { puk = newValue } }
    }
  }

  /// A session over `transport`. Nothing is sent yet: the first operation SELECTs in its own transaction;
  /// GET VERSION waits until something needs the quirks (`loadQuirks()`).
  public init(transport: SmartCardTransport, trace: TraceSink? = nil) {
    card = SmartCardProtocol(transport: transport, trace: trace)
    // Extended APDUs only where the card says so in its ATR; otherwise command chaining.
    card.useExtendedLength = ATR(transport.atr).supportsExtendedLength
  }

  /// Opens a session and checks that the card has a PIV application (throws `.notPIV` otherwise).
  public static func open(transport: SmartCardTransport, trace: TraceSink? = nil) throws(TokenError) -> PIVSession {
    let session = PIVSession(transport: transport, trace: trace)
    try session.transact { () throws(TokenError) in }
    return session
  }

  /// Runs `body` inside one PC/SC transaction that begins with SELECT (nested calls share it).
  public func transact<T>(_ body: () throws(TokenError) -> T) throws(TokenError) -> T {
    if transactionDepth > 0 || cardHeld {
      transactionDepth += 1
      defer { transactionDepth -= 1 }
      return try body()
    }
    do { try card.transport.beginTransaction() } catch { throw .smartCard(error) }
    pinCache = PINCache()
    transactionDepth += 1
    var keep = false
    defer {
      transactionDepth -= 1
      if keep {
        cardHeld = true
      } else {
        pinCache = PINCache()
        card.transport.endTransaction()
      }
    }
    try select()
    keep = holdsCard
    return try body()
  }

  /// Sends GET VERSION once per session, the first time something shows it (the name in a listing), not with
  /// every SELECT: a command that needs none of it (verify + sign, PIN change from a script) does not pay for it
  /// (HardwareNotes.md, PIV round trips). Nothing else depends on it: each optional command is decided by the
  /// card's own answer to it (`CardAnswers`).
  @discardableResult
  public func loadQuirks() throws(TokenError) -> TokenQuirks {
    if answers.versionAsked { return quirks }
    return try transact { () throws(TokenError) -> TokenQuirks in
      let r = try send(APDU(ins: 0xFD))
      answers.versionAsked = true
      if r.statusWord == .success, r.data.count >= 3 {
        answers.version = r.data.prefix(3).map { Int($0) }
      }
      return quirks
    }
  }

  /// Ends the transaction `holdsCard` kept: other processes may use the card again. The next operation
  /// begins a new transaction with SELECT.
  public func releaseCard() {
    guard cardHeld else { return }
    cardHeld = false
    pinCache = PINCache()
    card.transport.endTransaction()
  }

  func select() throws(TokenError) {
    let r = try send(APDU(ins: 0xA4, p1: 0x04, data: Self.aid, le: 0), reselectOnReset: false)
    switch r.statusWord {
    case .success: return
    case .fileNotFound, .insNotSupported, .claNotSupported, .incorrectP1P2: throw .notPIV(reader: reader)
    default: throw .unexpectedStatus(r.statusWord, operation: "SELECT PIV")
    }
  }

  /// One logical command. After a card reset by someone else (`SCARD_W_RESET_CARD`) or a removal that
  /// was quickly undone, it reconnects once, SELECTs again and retries once; a card still gone is reported.
  /// (A retried VERIFY-dependent command then fails cleanly with 6982: the reset cleared the PIN state.)
  func send(_ apdu: APDU, reselectOnReset: Bool = true) throws(TokenError) -> APDUResponse {
    if !Self.leavesPINStateAlone(apdu.ins) { pinCache = PINCache() }
    do {
      return try card.send(apdu)
    } catch {
      let removed: Bool
      switch error {
      case .pcsc(let st, _) where st.isReset: removed = false
      case .cardRemoved: removed = true
      default: throw .smartCard(error)
      }
      pinCache = PINCache()  // a reset card has a new PIN state
      do { try card.transport.reconnect() } catch {
        if case .noCard = error { throw .smartCard(.cardRemoved(reader: reader)) }  // still out: it was removed
        // A USB token pulled takes its reader with it: pcscd answers the reconnect of a handle on a reader it has
        // removed with SCARD_E_INVALID_VALUE (or _INVALID_HANDLE). What happened is still the removal.
        if removed { throw .smartCard(.cardRemoved(reader: reader)) }
        throw .smartCard(error)
      }
      if reselectOnReset { try select() }
      do { return try card.send(apdu) } catch { throw .smartCard(error) }
    }
  }

  /// Commands that read and change no PIN/PUK state: SELECT, GET DATA, GET RESPONSE and Yubico GET METADATA,
  /// GET SERIAL, GET VERSION. Any other command clears what `pinStatus` remembered.
  static func leavesPINStateAlone(_ ins: UInt8) -> Bool {
    [0xA4, 0xCB, 0xC0, 0xF7, 0xF8, 0xFD].contains(ins)
  }

  func expectSuccess(_ r: APDUResponse, _ operation: String) throws(TokenError) {
    switch r.statusWord {
    case .success: return
    case .securityStatusNotSatisfied: throw .securityStatusNotSatisfied(operation: operation)
    default: throw .unexpectedStatus(r.statusWord, operation: operation)
    }
  }
}
