import Dispatch
import FoundationEssentials
import Glibc
import Platform
import Synchronization

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
  /// The USB device the token is on (`USBIdentity.key`), when sysfs tells; tokens with the same value are one
  /// physical token (a YubiKey's PIV card and FIDO2 key).
  public var usbDevice: String?
  /// The other tokens on the same USB device (their ids).
  public var sameDeviceAs: [String]?
  /// A listing's one physical token (`USBIdentity.merge`): every id that names it (`--token` takes either), its
  /// kinds, and the FIDO2 key's PIN when the token is a PIV card and a FIDO2 key in one USB device.
  public var ids: [String]?
  public var kinds: [TokenKind]?
  public var fido2PIN: PINStatus?
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
  /// Discovery read the details (firmware version in the name, the PIN's maximum and default flag), not
  /// just what identifies the card and its tries left (`TokenDiscovery.details`).
  public var detailed = true
}

/// A reader's card or a FIDO2 key that discovery could not use, and why (e.g. `.noAnswer(operation: "open")`
/// for a key that accepted the connection and stayed silent).
public struct UnusableToken: Sendable, Equatable {
  /// The id the token would have had, where it is known without talking to it (FIDO2 keys).
  public var id: String?
  /// The reader name (PC/SC) or the device path (FIDO2).
  public var reader: String
  public var reason: TokenError

  public init(id: String? = nil, reader: String, reason: TokenError) {
    self.id = id
    self.reader = reader
    self.reason = reason
  }
}

/// Hands one probe's outcome from its thread to the thread that collects it. The value (a session, not `Sendable`)
/// moves from the probing thread, which has no use of it after `store`, to the one `wait` returns it to; the
/// semaphore orders the write before the read (`release` happens after `store`, the read after `wait`), so no lock
/// is needed. A waiter that gives up (`wait(until:)`) never reads the value.
///
/// `wait` takes the value out: the probing thread still holds the handover until its closure is torn down, and a
/// session left in it would be freed there, whenever that thread runs last — its card disconnected and its context
/// released on that thread while the collecting one is inside pcsc-lite, or exits (HardwareNotes.md, PC/SC).
// @unchecked: the value shares its thread's PC/SC context (no region move to check); the semaphore orders each use.
final class Handover<T>: @unchecked Sendable {
  private let done = DispatchSemaphore(value: 0)
  private var value: T?
  func put(_ v: T) {
    store(v)
    release()
  }
  /// Keeps the value without waking the waiter yet (`release` does).
  func store(_ v: T) { value = v }
  func release() { done.signal() }
  func wait() -> T {
    done.wait()
    defer { value = nil }
    return value!
  }
  /// The value, waited for until `deadline` (uptime nanoseconds); nil when it was not put by then.
  func wait(until deadline: UInt64) -> T? {
    guard done.wait(timeout: DispatchTime(uptimeNanoseconds: deadline)) == .success else { return nil }
    return value.take()
  }
}

/// Hands out 0, 1, 2, ... to whichever thread asks.
final class Counter: Sendable {
  private let value = Atomic(0)
  func increment() -> Int { value.wrappingAdd(1, ordering: .relaxed).oldValue }
}

/// What discovery found, including readers that hold no token we can use (so messages can say why).
public struct DiscoveryResult {
  public var found: [DiscoveredToken] = []
  public var fido2Found: [DiscoveredFIDO2] = []
  /// Tokens read for a listing, without a session (`TokenDiscovery.sessions` off): the cards, then the keys.
  public var listed: [TokenInfo] = []
  public var tokens: [TokenInfo] { found.map(\.info) + fido2Found.map(\.info) + listed }
  /// Readers without a card.
  public var emptyReaders: [String] = []
  /// Readers whose card has no PIV application, and FIDO2 keys that failed or did not answer (with the reason).
  public var unusableCards: [UnusableToken] = []
  public var readerCount = 0
  /// PC/SC could not be used (e.g. pcscd not running) while FIDO2 keys were found.
  public var pcscProblem: SmartCardError?
}

/// Lists the tokens present: PIV cards in PC/SC readers (`TokenDiscovery+PIV`) and FIDO2 keys through libfido2
/// (`TokenDiscovery+FIDO2`), probed side by side.
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

  /// Virtual FIDO2 keys to probe; `nil`: those named in `TOKENBRIDGE_VIRTUAL_FIDO`.
  public var virtualFIDO2Paths: [String]?

  /// Read what a listing or a prompt shows besides the id and the tries left: the firmware version (GET
  /// VERSION, for the name "YubiKey 5.4.3") and the PIN's maximum and default flag (GET METADATA). Off, a lone
  /// card costs SELECT, GET SERIAL and an empty VERIFY (its tries): what a command run from a script needs.
  /// The version is read anyway when several tokens are present (a choice shows their names).
  public var details = true

  /// Ask each card who it is (GET SERIAL, or the CHUID when it has no serial). Off, and only in a run without
  /// `details`, a lone token with no `onlyID` is not asked: a command that never shows or stores the token's id
  /// (a script's `key sign`, `pin change`) saves that APDU. Such a card is named by its reader, as a card that
  /// cannot name itself always is (`piv-<reader>`, "PIV card in <reader>").
  public var identify = true

  /// Keep each PIV card's discovery transaction until its session ends or `releaseCard()` (`PIVSession.holdsCard`):
  /// a command that goes on to use the card SELECTs it once and reads its PIN tries once. A listing leaves it off.
  public var holdCards = false

  /// When set, FIDO2 keys whose id (known without opening them) is another are not probed at all: a command
  /// about one token does not wait for the others.
  public var onlyID: String?

  /// When set, only cards in these PC/SC readers are connected and probed; an empty set asks PC/SC nothing. For a
  /// command that already knows where its token is from a listing moments ago (`provision`'s rows, worked side by
  /// side: each would otherwise connect to every card, waiting for the transactions the other rows hold).
  public var cardReaders: Set<String>?

  /// Keep a session on each token for a command to use (`found`, `fido2Found`). Off, for a listing (`listed`):
  /// each card is let go by the thread that read it (its transaction ended; pcscd disconnects it when that thread's
  /// PC/SC context is released, in the same thread: no disconnect left for the main thread), and each FIDO2 key is
  /// closed by the thread that read it.
  public var sessions = true

  /// With `sessions`: read each FIDO2 key's getInfo (its `TokenInfo.fido2`, capabilities and version). Off, a key's
  /// session is opened (libfido2's CTAPHID_INIT and getInfo) and its PIN tries read, and its entry has no `fido2`
  /// info: for a command that needs nothing more before it uses the key (an assertion: libfido2 picks the PIN
  /// protocol and token kind from the getInfo of its open).
  public var fido2Info = true

  /// How long each FIDO2 key may take (its probe is bounded by `fido2Deadlines.probeMs` per call).
  public var fido2Deadlines: FIDO2Deadlines = .standard

  /// `--token` names a physical token by either of its ids: the id of the other part of the same USB device (a
  /// FIDO2 key's for a PIV card's, and back), from a discovery of everything; nil when there is none.
  public func sibling(of id: String) -> String? {
    var all = TokenDiscovery(trace: nil, includePUK: false, includeFIDO2: true)
    all.details = false
    all.sessions = false  // ids only
    all.virtualFIDO2Paths = virtualFIDO2Paths
    all.fido2Deadlines = fido2Deadlines
    guard let found = try? all.discover() else { return nil }
    let grouped = USBIdentity.group(found.tokens)
    guard let key = grouped.first(where: { $0.id == id })?.usbDevice else { return nil }
    return grouped.first(where: { $0.usbDevice == key && $0.id != id })?.id
  }

  public func discover() throws(TokenError) -> DiscoveryResult {
    var result = DiscoveryResult()
    // libfido2 is loaded only when a key may be there (sysfs or the virtual key list say so: `expectedKeys`).
    // The FIDO2 side runs beside the PC/SC side: libfido2's manifest, then a probe thread per key. PC/SC needs only
    // how many keys to expect (for a lone card's `detailed`), which sysfs and the virtual key list tell.
    let expectedKeys = includeFIDO2 ? FIDO2Session.expectedKeys(virtualPaths: virtualFIDO2Paths) : 0
    let lookForKeys = expectedKeys > 0  // `keysPossible`, from the same one look at sysfs
    typealias FIDO2Side = [(ref: FIDO2DeviceRef, outcome: ProbeOutcome)]
    let fido2Side = Handover<FIDO2Side>()
    if lookForKeys {
      let (paths, onlyID, deadlines) = (virtualFIDO2Paths, onlyID, fido2Deadlines)
      let (tracing, details, sessions, fido2Info) = (trace != nil, details, sessions, fido2Info)
      let side: @Sendable () -> FIDO2Side = {
        Self.startFIDO2Probes(
          virtualPaths: paths, onlyID: onlyID, deadlines: deadlines, tracing: tracing, details: details,
          sessions: sessions, info: fido2Info)
      }
      if !POSIXThread.start({ fido2Side.put(side()) }) { fido2Side.put(side()) }
    }
    let pcscError = cardReaders?.isEmpty == true ? nil : discoverPCSC(into: &result, otherTokens: expectedKeys)
    let probes = lookForKeys ? fido2Side.wait() : []
    collect(probes, into: &result)
    if let pcscError {
      // No pcscd: FIDO2 keys still work; the PC/SC error matters only when nothing else was seen (a key that
      // failed its probe is the diagnosis then, with the PC/SC error beside it, not "pcscd is not running").
      if result.fido2Found.isEmpty && result.listed.isEmpty && result.unusableCards.isEmpty {
        throw .smartCard(pcscError)
      }
      result.pcscProblem = pcscError
    }
    return result
  }
}
