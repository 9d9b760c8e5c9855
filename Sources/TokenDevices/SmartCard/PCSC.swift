import CPCSC
import Dispatch
import FoundationEssentials
import Glibc
import Platform
import Synchronization

/// A pcsc-lite context (`SCardEstablishContext`). pcsc-lite wants one context per thread: a context and
/// the cards connected through it are used by one thread at a time.
public final class PCSCContext {
  let handle: SCARDCONTEXT

  public init() throws(SmartCardError) {
    do { try SystemLibrary.pcsclite.load() } catch { throw .libraryMissing(error) }
    let (rv, ctx) = try PCSCEstablish.context()
    try Self.check(rv, "SCardEstablishContext")
    handle = ctx
  }

  deinit { _ = PCSCCall.run { SCardReleaseContext(handle) } }

  /// Names of the readers pcscd knows; empty when there are none. One call (one round trip to pcscd) into a buffer
  /// that holds what pcsc-lite can list (16 readers of at most 128 bytes each); the usual size query first costs
  /// a second round trip (each `SCardListReaders` fetches every reader's state from pcscd). A PC/SC layer with
  /// more to say answers "insufficient buffer" and the size query follows.
  public func readers() throws(SmartCardError) -> [String] {
    var len = DWORD(4096)
    var buf = [CChar](repeating: 0, count: Int(len))
    var rv = PCSCCall.run { SCardListReaders(handle, nil, &buf, &len) }
    if PCSCStatus(rv) == .insufficientBuffer {
      len = 0
      rv = PCSCCall.run { SCardListReaders(handle, nil, nil, &len) }
      if PCSCStatus(rv) == .noReadersAvailable { return [] }
      try Self.check(rv, "SCardListReaders")
      buf = [CChar](repeating: 0, count: Int(len))
      rv = PCSCCall.run { SCardListReaders(handle, nil, &buf, &len) }
    }
    if PCSCStatus(rv) == .noReadersAvailable { return [] }
    try Self.check(rv, "SCardListReaders")
    return buf.prefix(Int(len)).split(separator: 0).map {
      String(decoding: $0.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
  }

  /// The states of `readers` in one `SCardGetStatusChange` (one round trip to pcscd for all of them).
  public func readerStates(_ readers: [String]) throws(SmartCardError) -> [(present: Bool, atr: [UInt8])] {
    guard !readers.isEmpty else { return [] }
    let names = readers.map { strdup($0) }
    defer { names.forEach { free($0) } }
    var states = names.map { name -> SCARD_READERSTATE in
      var st = SCARD_READERSTATE()
      st.szReader = UnsafePointer(name)
      st.dwCurrentState = DWORD(SCARD_STATE_UNAWARE)
      return st
    }
    let count = DWORD(states.count)
    let rv = PCSCCall.run { SCardGetStatusChange(handle, 0, &states, count) }
    if PCSCStatus(rv) == .unknownReader { throw .unknownReader(readers.joined(separator: ", ")) }
    try Self.check(rv, "SCardGetStatusChange")
    return states.map { st in
      let present = st.dwEventState & DWORD(SCARD_STATE_PRESENT) != 0
      let atr = withUnsafeBytes(of: st.rgbAtr) { Array($0.prefix(Int(st.cbAtr))) }
      return (present, present ? atr : [])
    }
  }

  /// Current state of one reader: whether a card is present and its ATR.
  public func readerState(_ reader: String) throws(SmartCardError) -> (present: Bool, atr: [UInt8]) {
    var st = SCARD_READERSTATE()
    let rv = reader.withCString { name in
      st.szReader = name
      st.dwCurrentState = DWORD(SCARD_STATE_UNAWARE)
      defer { st.szReader = nil }
      return PCSCCall.run { SCardGetStatusChange(handle, 0, &st, 1) }
    }
    if PCSCStatus(rv) == .unknownReader { throw .unknownReader(reader) }
    try Self.check(rv, "SCardGetStatusChange")
    let present = st.dwEventState & DWORD(SCARD_STATE_PRESENT) != 0
    let atr = withUnsafeBytes(of: st.rgbAtr) { Array($0.prefix(Int(st.cbAtr))) }
    return (present, present ? atr : [])
  }

  /// Waits, up to `seconds`, for a reader whose name `matches` to hold a card; returns its name, or nil when the
  /// time ran out. Event-driven: SCardGetStatusChange on the readers and on pcsc-lite's `\\?PnP?\Notification`
  /// pseudo-reader (a reader added or removed), never a sleep loop.
  public func waitForCard(in matches: (String) -> Bool, seconds: Double) throws(SmartCardError) -> String? {
    let deadline = Date().addingTimeInterval(seconds)
    var known: [String: DWORD] = [:]
    while true {
      let names = try readers()
      for name in names where matches(name) {
        if (try? readerState(name).present) == true { return name }
      }
      let left = deadline.timeIntervalSinceNow
      guard left > 0 else { return nil }
      let (rv, events) = Self.statusChange(
        handle, readers: names, current: { known[$0] }, timeoutMs: DWORD(min(left, 3600) * 1000))
      let st = PCSCStatus(rv)
      if st == .timeout { return nil }
      if st != .success && st != .unknownReader { try Self.check(rv, "SCardGetStatusChange") }
      for (name, event) in zip(names, events) { known[name] = event & ~DWORD(SCARD_STATE_CHANGED) }
    }
  }

  /// One SCardGetStatusChange on `readers` and on pcsc-lite's `\\?PnP?\Notification` pseudo-reader, whose current
  /// state carries the reader count in its high word (so a reader added or removed ends the wait too). `current`:
  /// each reader's state last seen (nil: UNAWARE, answered at once). Returns the call's result and each reader's
  /// event state, in the order of `readers`. Shared by `waitForCard` and `PCSCWatcher`.
  static func statusChange(
    _ context: SCARDCONTEXT, readers: [String], current: (String) -> DWORD?, timeoutMs: DWORD
  ) -> (rv: LONG, events: [DWORD]) {
    let watched = ["\\\\?PnP?\\Notification"] + readers
    let cStrings = watched.map { strdup($0) }
    defer { cStrings.forEach { free($0) } }
    var states = watched.enumerated().map { i, name in
      var st = SCARD_READERSTATE()
      st.szReader = UnsafePointer(cStrings[i])
      st.dwCurrentState = i == 0 ? DWORD(readers.count << 16) : (current(name) ?? DWORD(SCARD_STATE_UNAWARE))
      return st
    }
    let count = DWORD(states.count)
    let rv = PCSCCall.run { SCardGetStatusChange(context, timeoutMs, &states, count) }
    return (rv, states.dropFirst().map(\.dwEventState))
  }

  /// Connects in shared mode (T=1 or T=0).
  /// `atr`: the card's ATR as a state read a moment ago gave it (saves reading the state again).
  public func connect(_ reader: String, atr: [UInt8]? = nil) throws(SmartCardError) -> PCSCCard {
    try PCSCCard(context: self, reader: reader, atr: atr)
  }

  /// The reader's `SCARD_ATTR_CHANNEL_ID` (PC/SC part 3: 0xDDDDCCCC, DDDD the channel type, 0x0020 for USB), read
  /// over a direct connection (no card needed, none touched); nil when the driver does not say (vpcd, a reader
  /// held exclusively by another process). libccid puts the USB bus number and device address in CCCC.
  public func channelID(_ reader: String) -> UInt32? {
    var h: SCARDHANDLE = 0
    var proto: DWORD = 0
    let rv = reader.withCString { name in
      PCSCCall.run { SCardConnect(handle, name, DWORD(SCARD_SHARE_DIRECT), 0, &h, &proto) }
    }
    guard PCSCStatus(rv) == .success else { return nil }
    defer { _ = PCSCCall.run { SCardDisconnect(h, DWORD(SCARD_LEAVE_CARD)) } }
    var value = [UInt8](repeating: 0, count: 8)
    var length = DWORD(value.count)
    // SCARD_ATTR_CHANNEL_ID = SCARD_ATTR_VALUE(SCARD_CLASS_COMMUNICATIONS (2), 0x0110) (pcsc-lite's reader.h).
    let attribute: DWORD = 2 << 16 | 0x0110
    let got = PCSCCall.run { SCardGetAttrib(h, attribute, &value, &length) }
    guard PCSCStatus(got) == .success, length == 4 else { return nil }
    return UInt32(value[0]) | UInt32(value[1]) << 8 | UInt32(value[2]) << 16 | UInt32(value[3]) << 24
  }

  static func check(_ rv: LONG, _ call: String, reader: String = "") throws(SmartCardError) {
    if rv == PCSCCall.unresponsiveRV { throw .serviceUnresponsive }
    let st = PCSCStatus(rv)
    if st == .success { return }
    switch st {
    case .noService, .serviceStopped: throw .serviceUnavailable
    case .noReadersAvailable: throw .noReaders
    case .noSmartcard: throw .noCard(reader: reader)
    case .removedCard, .readerUnavailable: throw .cardRemoved(reader: reader)
    case .unknownReader: throw .unknownReader(reader)
    default: throw .pcsc(st, call: call)
    }
  }
}

extension PCSCStatus {
  init(_ rv: LONG) { self.init(rawValue: UInt32(truncatingIfNeeded: rv)) }
}

/// A card connection (`SCardConnect`, shared mode). Moves bytes; knows no application.
public final class PCSCCard: SmartCardTransport {
  public let reader: String
  public private(set) var atr: [UInt8]
  let context: PCSCContext
  var handle: SCARDHANDLE = 0
  var protocolID: DWORD = 0
  var inTransaction = false
  var closed = false
  public var resetOnClose = false

  init(context: PCSCContext, reader: String, atr knownATR: [UInt8]? = nil) throws(SmartCardError) {
    self.context = context
    self.reader = reader
    self.atr = []
    var h: SCARDHANDLE = 0
    var proto: DWORD = 0
    let rv = reader.withCString { name in
      PCSCCall.run {
        SCardConnect(
          context.handle, name, DWORD(SCARD_SHARE_SHARED), DWORD(SCARD_PROTOCOL_T0 | SCARD_PROTOCOL_T1), &h, &proto)
      }
    }
    try PCSCContext.check(rv, "SCardConnect", reader: reader)
    handle = h
    protocolID = proto
    atr = knownATR ?? (try? context.readerState(reader).atr) ?? []
  }

  deinit { close() }

  /// Leaves the handle to its context (the session must not be used after): no `SCardDisconnect` from this thread.
  /// pcscd disconnects every handle of a context when it is released (winscard_svc.c `MSGRemoveContext`: LEAVE_CARD
  /// for a handle that holds no transaction), so the transaction is ended first. Why: pcsc-lite's client removes a
  /// disconnected handle from lists other threads read, without the lock they read them under; a probing thread
  /// that disconnects while another releases its context crashed one listing in 600 (HardwareNotes.md, PC/SC).
  public func detach() {
    guard !closed else { return }
    endTransaction()
    closed = true
  }

  /// Disconnects now, once. A transaction still held ends with it: pcsc-lite's SCardDisconnect releases the
  /// handle's lock first (winscard.c, "unlock any blocks on this context"; HardwareNotes.md): one round trip, not
  /// two. Only where no other thread is using pcsc-lite (`detach` otherwise).
  func close() {
    guard !closed else { return }
    closed = true
    let disposition = DWORD(resetOnClose ? SCARD_RESET_CARD : SCARD_LEAVE_CARD)
    if inTransaction && resetOnClose {
      // The reset (when due) happens while this process still holds the card, so no other process ever sees it
      // verified; the disconnect then leaves it. Resetting in both was a second power cycle of the card, a round
      // trip to the reader for nothing (pcscd -d: "Reset complete." twice; HardwareNotes.md).
      _ = PCSCCall.run { SCardEndTransaction(handle, disposition) }
      _ = PCSCCall.run { SCardDisconnect(handle, DWORD(SCARD_LEAVE_CARD)) }
    } else {
      _ = PCSCCall.run { SCardDisconnect(handle, disposition) }
    }
    inTransaction = false
  }

  /// Takes the card for this process (blocks while another process holds it).
  public func beginTransaction() throws(SmartCardError) {
    var rv = PCSCCall.run { SCardBeginTransaction(handle) }
    // Each run that ends resets the card (see `resetOnClose`): with several runs in parallel it can be reset
    // again between our reconnect and our next try, so try as often as there may be runs ending meanwhile.
    for _ in 0..<16 where PCSCStatus(rv).isReset {
      try reconnect()
      rv = PCSCCall.run { SCardBeginTransaction(handle) }
    }
    try PCSCContext.check(rv, "SCardBeginTransaction", reader: reader)
    inTransaction = true
  }

  public func endTransaction() {
    guard inTransaction else { return }
    _ = PCSCCall.run { SCardEndTransaction(handle, DWORD(SCARD_LEAVE_CARD)) }
    inTransaction = false
  }

  /// After `SCARD_W_RESET_CARD`: keep the handle, re-power the session.
  public func reconnect() throws(SmartCardError) {
    let rv = PCSCCall.run {
      SCardReconnect(
        handle, DWORD(SCARD_SHARE_SHARED), DWORD(SCARD_PROTOCOL_T0 | SCARD_PROTOCOL_T1), DWORD(SCARD_LEAVE_CARD),
        &protocolID)
    }
    try PCSCContext.check(rv, "SCardReconnect", reader: reader)
  }

  /// One APDU out, one response in (data ‖ SW1 SW2). Throws `.cardReset` through `SmartCardError.pcsc`
  /// with `.resetCard` so the session above can redo its SELECT.
  public func transmit(_ command: [UInt8]) throws(SmartCardError) -> [UInt8] {
    // Room for an extended-length response (ISO 7816-4 §5.1: up to 65,536 data bytes and SW1 SW2); left
    // uninitialised, as pcsc-lite writes the first `outLen` bytes (docs/performance.md).
    let capacity = 65548
    var outLen = DWORD(capacity)
    // The PCI header only names the protocol; a local copy is as good as pcsc-lite's globals.
    var pci = SCARD_IO_REQUEST(dwProtocol: protocolID, cbPciLength: DWORD(MemoryLayout<SCARD_IO_REQUEST>.size))
    var rv: LONG = 0
    let out = [UInt8](unsafeUninitializedCapacity: capacity) { buf, count in
      rv = command.withUnsafeBufferPointer { cmd in
        PCSCCall.run {
          SCardTransmit(handle, &pci, cmd.baseAddress, DWORD(cmd.count), nil, buf.baseAddress, &outLen)
        }
      }
      count = rv == SCARD_S_SUCCESS ? min(Int(outLen), capacity) : 0
    }
    try PCSCContext.check(rv, "SCardTransmit", reader: reader)
    return out
  }
}
