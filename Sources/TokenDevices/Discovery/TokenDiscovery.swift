import Foundation

/// The kinds of token TokenBridge drives.
public enum TokenKind: String, Codable, Sendable {
  case piv
  case fido2
}

/// One physical token as discovery sees it.
public struct TokenInfo: Codable, Sendable, Equatable {
  /// Stable across runs and readers: `piv-<serial>` (YubiKey serial) or `piv-<CHUID GUID prefix>`, else
  /// derived from the reader name.
  public var id: String
  public var kind: TokenKind
  public var name: String
  public var reader: String?
  public var capabilities: [String]
  public var serial: UInt32?
  public var version: String?
  public var pin: PINStatus?
  public var puk: PINStatus?
  /// FIDO2 keys: what getInfo says (PIN set, minPINLength, forcePINChange, …).
  public var fido2: FIDO2Info?
}

/// A FIDO2 key found by discovery, with its open session.
public struct DiscoveredFIDO2 {
  public let info: TokenInfo
  public let session: FIDO2Session
}

/// A token found by discovery, with the session discovery opened on it (reused, not reopened).
public struct DiscoveredToken {
  public let info: TokenInfo
  public let session: PIVSession
}

/// What discovery found, including readers that hold no token we can use (so messages can say why).
public struct DiscoveryResult {
  public var found: [DiscoveredToken] = []
  public var fido2Found: [DiscoveredFIDO2] = []
  public var tokens: [TokenInfo] { found.map(\.info) + fido2Found.map(\.info) }
  /// Readers without a card.
  public var emptyReaders: [String] = []
  /// Readers whose card has no PIV application, or did not answer.
  public var unusableCards: [(reader: String, reason: TokenError)] = []
  public var readerCount = 0
  /// PC/SC could not be used (e.g. pcscd not running) while FIDO2 keys were found.
  public var pcscProblem: SmartCardError?
}

/// Lists PC/SC readers and the PIV tokens in them. FIDO2 keys join in a later layer (libfido2).
public struct TokenDiscovery {
  public var trace: TraceSink?
  /// Also read the PUK's tries (one more APDU per card); listings want it, PIN operations do not.
  public var includePUK: Bool

  /// Also list FIDO2 keys (libfido2's hidraw keys and `TOKENBRIDGE_VIRTUAL_FIDO`).
  public var includeFIDO2: Bool

  public init(trace: TraceSink? = nil, includePUK: Bool = true, includeFIDO2: Bool = true) {
    self.trace = trace
    self.includePUK = includePUK
    self.includeFIDO2 = includeFIDO2
  }

  /// FIDO2 keys: getInfo and PIN retries (no try spent). Ids: `fido2-<socket name>` for virtual keys,
  /// `fido2-<hidraw name>` otherwise (CTAP has no serial number; see HardwareNotes.md).
  func discoverFIDO2(into result: inout DiscoveryResult) {
    for ref in FIDO2Session.list() {
      do {
        let session = try FIDO2Session(ref)
        session.trace = trace
        var info = try session.info()
        info.uvRetries = session.uvRetries(info)
        let pin = info.pinIsSet ? try session.pinStatus() : nil
        let name = URL(fileURLWithPath: ref.path).lastPathComponent
        let id = "fido2-" + String(name.lowercased().map { $0.isLetter || $0.isNumber ? $0 : "-" })
        var caps = ["fido2"]
        if info.extensions.contains("hmac-secret") { caps.append("hmac-secret") }
        result.fido2Found.append(
          DiscoveredFIDO2(
            info: TokenInfo(
              id: id, kind: .fido2, name: ref.product, reader: ref.path, capabilities: caps, serial: nil,
              version: info.versions.last, pin: pin, puk: nil, fido2: info), session: session))
      } catch {
        result.unusableCards.append((ref.path, error))
      }
    }
  }

  /// Every reader, and for each card a PIV probe in one transaction: SELECT, GET VERSION, GET SERIAL (CHUID
  /// only when there is no serial), PIN status (and PUK status when `includePUK`).
  /// PIN status is read without spending a try.
  public func discover() throws(TokenError) -> DiscoveryResult {
    var result = DiscoveryResult()
    if includeFIDO2 { discoverFIDO2(into: &result) }
    let context: PCSCContext
    let readers: [String]
    do {
      context = try PCSCContext()
      readers = try context.readers()
    } catch {
      // No pcscd: FIDO2 keys still work; the PC/SC error matters only when nothing else was found.
      if result.fido2Found.isEmpty { throw .smartCard(error) }
      result.pcscProblem = error
      return result
    }
    result.readerCount = readers.count
    for reader in readers {
      do {
        let (present, _) = try context.readerState(reader)
        guard present else {
          result.emptyReaders.append(reader)
          continue
        }
        let session = PIVSession(transport: try context.connect(reader), trace: trace)
        result.found.append(
          DiscoveredToken(info: try Self.describe(session, reader: reader, includePUK: includePUK), session: session))
      } catch let error as SmartCardError {
        if case .noCard = error {
          result.emptyReaders.append(reader)
        } else {
          result.unusableCards.append((reader, .smartCard(error)))
        }
      } catch let error as TokenError {
        result.unusableCards.append((reader, error))
      } catch {
        result.unusableCards.append((reader, .unsupported("\(error)")))
      }
    }
    return result
  }

  static func describe(_ session: PIVSession, reader: String, includePUK: Bool) throws(TokenError) -> TokenInfo {
    try session.transact { () throws(TokenError) -> TokenInfo in
      let identity = try session.identity(chuid: .whenNoSerial)
      let pin = try session.pinStatus(.pin)
      let puk = includePUK ? try? session.pinStatus(.puk) : nil
      let id: String
      if let serial = identity.serial {
        id = "piv-\(serial)"
      } else if let guid = identity.chuidGUID, guid.contains(where: { $0 != "0" }) {
        id = "piv-" + guid.prefix(12)
      } else {
        id = "piv-" + String(reader.lowercased().map { $0.isLetter || $0.isNumber ? $0 : "-" })
      }
      let name =
        session.quirks.contains(.yubicoExtensions) ? "YubiKey \(identity.version ?? "")".trimmingSuffix() : "PIV card"
      return TokenInfo(
        id: id, kind: .piv, name: name, reader: reader, capabilities: ["piv"], serial: identity.serial,
        version: identity.version, pin: pin, puk: puk)
    }
  }
}

extension String {
  fileprivate func trimmingSuffix() -> String {
    var s = self
    while s.last == " " { s.removeLast() }
    return s
  }
}
