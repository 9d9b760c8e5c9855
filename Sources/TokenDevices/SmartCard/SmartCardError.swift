import Platform

/// A pcsc-lite return code (`LONG`), kept as a value; named constants from pcsclite.h.
public struct PCSCStatus: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
  public let rawValue: UInt32
  public init(rawValue: UInt32) { self.rawValue = rawValue }

  public static let success = PCSCStatus(rawValue: 0)
  public static let cancelled = PCSCStatus(rawValue: 0x8010_0002)
  public static let invalidHandle = PCSCStatus(rawValue: 0x8010_0003)
  public static let insufficientBuffer = PCSCStatus(rawValue: 0x8010_0008)
  public static let unknownReader = PCSCStatus(rawValue: 0x8010_0009)
  public static let timeout = PCSCStatus(rawValue: 0x8010_000A)
  public static let sharingViolation = PCSCStatus(rawValue: 0x8010_000B)
  public static let noSmartcard = PCSCStatus(rawValue: 0x8010_000C)
  public static let invalidValue = PCSCStatus(rawValue: 0x8010_0011)
  public static let protoMismatch = PCSCStatus(rawValue: 0x8010_000F)
  public static let notTransacted = PCSCStatus(rawValue: 0x8010_0016)
  public static let readerUnavailable = PCSCStatus(rawValue: 0x8010_0017)
  public static let noService = PCSCStatus(rawValue: 0x8010_001D)
  public static let serviceStopped = PCSCStatus(rawValue: 0x8010_001E)
  public static let noReadersAvailable = PCSCStatus(rawValue: 0x8010_002E)
  public static let unresponsiveCard = PCSCStatus(rawValue: 0x8010_0066)
  public static let unpoweredCard = PCSCStatus(rawValue: 0x8010_0067)
  public static let resetCard = PCSCStatus(rawValue: 0x8010_0068)
  public static let removedCard = PCSCStatus(rawValue: 0x8010_0069)

  public var description: String { "0x" + String(rawValue, radix: 16, uppercase: true) }

  /// The card was reset by someone else: reconnect and redo SELECT/VERIFY. `SCARD_E_PROTO_MISMATCH` from a
  /// transmit on a handle whose protocol pcscd itself negotiated is the same event seen a moment early: the card's
  /// protocol changed (pcscd resetting it for a client that died inside its transaction) before this handle was
  /// marked reset (HardwareNotes.md, "PC/SC").
  var isReset: Bool { self == .resetCard || self == .unpoweredCard || self == .protoMismatch }
}

/// Errors of the smart-card transport layer (pcsc-lite and APDU framing).
public enum SmartCardError: Error, Equatable, Sendable {
  /// pcscd is not running (or speaks another IPC version).
  case serviceUnavailable
  /// pcscd took the connection but did not answer in time (stopped, hung): PC/SC is not used by this process.
  case serviceUnresponsive
  /// pcscd runs but has no reader.
  case noReaders
  /// The reader is known but holds no card.
  case noCard(reader: String)
  /// The card was removed (or its reader unplugged) while in use.
  case cardRemoved(reader: String)
  /// The named reader does not exist.
  case unknownReader(String)
  /// The card answered with fewer than two bytes.
  case malformedResponse(Int)
  /// Response chaining (61xx) did not end.
  case responseTooLong
  /// Any other pcsc-lite failure, with the call that returned it.
  case pcsc(PCSCStatus, call: String)
  /// libpcsclite cannot be loaded (it is loaded at the first PC/SC use, not at start-up).
  case libraryMissing(LibraryUnavailable)
}
