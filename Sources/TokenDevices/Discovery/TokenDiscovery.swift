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
/// is needed. `@unchecked`: region checking cannot see that move (the session is made with the probing thread's
/// PC/SC context), so neither `sending` nor a `Mutex` can carry it.
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
    return value!
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

  /// The discovery id of a FIDO2 key: `fido2-<socket name>` for virtual keys, `fido2-<hidraw name>` otherwise
  /// (CTAP has no serial number; see HardwareNotes.md). Known without opening the key.
  public static func fido2ID(_ ref: FIDO2DeviceRef) -> String {
    let name = PathString.last(ref.path)  // not URL: building one was 1.5% of a 12-token listing (perf)
    return "fido2-" + String(name.lowercased().map { $0.isLetter || $0.isNumber ? $0 : "-" })
  }

  /// What one FIDO2 probe found, handed from the probing thread to the caller.
  enum FIDO2Probe {
    case found(DiscoveredFIDO2)
    case listed(TokenInfo)
    case unusable(UnusableToken)
  }

  /// The hand-over point between one probing thread and `collect` (the outcome and its trace lines). The outcome
  /// holds a non-Sendable `FIDO2Session` that moves from the probing thread (which has no use of it after `put`)
  /// to `collect`, as `Handover` does: the semaphore orders the write before the read, and a probe that has not
  /// signalled by the deadline is never read. `collect` blocks on the semaphore until the probe ends.
  final class ProbeOutcome: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private var value: (FIDO2Probe, [String])?
    func put(_ v: (FIDO2Probe, [String])) {
      value = v
      done.signal()
    }
    /// The outcome, waited for until `deadline` (uptime nanoseconds); nil when the probe has not ended by then.
    func take(until deadline: UInt64) -> (FIDO2Probe, [String])? {
      guard done.wait(timeout: DispatchTime(uptimeNanoseconds: deadline)) == .success else { return nil }
      return value.take()
    }
  }

  /// FIDO2 keys: getInfo and PIN retries (no try spent), each with its own deadlines, started before PC/SC discovery
  /// and collected after it, so one silent key delays nothing but itself and is reported as `.noAnswer`. Each key is
  /// opened through libfido2 by a thread of its own. Trace lines are collected per key and replayed in order by
  /// `collect`.
  static func startFIDO2Probes(
    virtualPaths: [String]?, onlyID: String?, deadlines: FIDO2Deadlines, tracing: Bool, details: Bool,
    sessions: Bool = true, info: Bool = true
  ) -> [(ref: FIDO2DeviceRef, outcome: ProbeOutcome)] {
    do { try FIDO2Session.loadLibrary() } catch {
      // Without libfido2 no key can be read: each key sysfs and the virtual key list name is unusable, saying why.
      let refs = FIDO2Session.presentWithoutLibrary(virtualPaths: virtualPaths).filter {
        onlyID == nil || Self.fido2ID($0) == onlyID
      }
      return refs.map { ref in
        let outcome = ProbeOutcome()
        outcome.put((.unusable(UnusableToken(id: Self.fido2ID(ref), reader: ref.path, reason: error)), []))
        return (ref, outcome)
      }
    }
    let refs = FIDO2Session.list(virtualPaths: virtualPaths).filter { onlyID == nil || Self.fido2ID($0) == onlyID }
    return refs.map { ref in
      let outcome = ProbeOutcome()
      POSIXThread.start {
        outcome.put(
          Self.probe(ref, deadlines: deadlines, tracing: tracing, details: details, info: info, keep: sessions))
      }
      return (ref, outcome)
    }
  }

  /// Waits for each probe (each ends by its own deadlines; the wait is bounded anyway, in case libfido2
  /// overran one) and adds what it found.
  func collect(
    _ probes: [(ref: FIDO2DeviceRef, outcome: ProbeOutcome)],
    into result: inout DiscoveryResult
  ) {
    // open (INIT + getInfo) + getInfo (when the open's answer could not be read) + getUVRetries + getPINRetries,
    // with room to spare.
    let end = DispatchTime.now().uptimeNanoseconds + UInt64(fido2Deadlines.probeMs) * 6 * 1_000_000
    for p in probes {
      guard let (probe, lines) = p.outcome.take(until: end) else {
        // The thread stays blocked in libfido2; it owns its session and ends with the process.
        result.unusableCards.append(
          UnusableToken(id: Self.fido2ID(p.ref), reader: p.ref.path, reason: .noAnswer(operation: "open")))
        continue
      }
      for line in lines { trace?(line) }
      switch probe {
      case .found(let k):
        k.session.trace = trace
        result.fido2Found.append(k)
      case .listed(let t): result.listed.append(t)
      case .unusable(let u): result.unusableCards.append(u)
      }
    }
  }

  /// Opens the key (libfido2: CTAPHID_INIT and getInfo), reads getInfo (kept: `FIDO2Session.info()`) and its PIN
  /// tries; with `details` also the UV tries (keys with built-in UV only). Without `info`, no getInfo of ours: the
  /// PIN tries are read all the same (a key that refuses the request has none to show). Without `keep`, the key is
  /// closed and only its entry is kept (a listing).
  static func probe(
    _ ref: FIDO2DeviceRef, deadlines: FIDO2Deadlines, tracing: Bool, details: Bool = true, info readInfo: Bool = true,
    keep: Bool = true
  ) -> (FIDO2Probe, [String]) {
    var lines: [String] = []
    let id = fido2ID(ref)
    do {
      let session = try FIDO2Session(ref, deadlines: deadlines, trace: tracing ? { lines.append($0) } : nil)
      defer { session.trace = nil }
      var info: FIDO2Info?
      var pin: PINStatus?
      if readInfo {
        var read = try session.info()
        if details { read.uvRetries = session.uvRetries(read) }
        info = read
        pin = read.pinIsSet ? try session.pinStatus() : nil
      } else {
        do { pin = try session.pinStatus() } catch .fido2(let code, _) where code > 0 { pin = nil }  // no clientPin
      }
      let entry = token(ref, info, pin)
      guard keep else {
        session.close()
        return (.listed(entry), lines)
      }
      return (.found(DiscoveredFIDO2(info: entry, session: session)), lines)
    } catch {
      return (.unusable(UnusableToken(id: id, reader: ref.path, reason: error)), lines)
    }
  }

  /// A FIDO2 key's entry: its id, product name, path, and what getInfo and its PIN tries say.
  static func token(_ ref: FIDO2DeviceRef, _ info: FIDO2Info?, _ pin: PINStatus?) -> TokenInfo {
    var caps = ["fido2"]
    if info?.extensions.contains("hmac-secret") == true { caps.append("hmac-secret") }
    return TokenInfo(
      id: fido2ID(ref), kind: .fido2, name: ref.product, reader: ref.path, capabilities: caps, serial: nil,
      version: info?.versions.last, pin: pin, puk: nil, fido2: info)
  }

  /// Every reader, and for each card a PIV probe in one transaction: SELECT, GET SERIAL (CHUID only when
  /// there is no serial), PIN status; with `details` (or several tokens) also GET VERSION and the PIN's
  /// metadata, and the PUK status when `includePUK`. PIN status is read without spending a try.
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
    let pcscError = discoverPCSC(into: &result, otherTokens: expectedKeys)
    let probes = lookForKeys ? fido2Side.wait() : []
    collect(probes, into: &result)
    if let pcscError {
      // No pcscd: FIDO2 keys still work; the PC/SC error matters only when nothing else was found.
      if result.fido2Found.isEmpty && result.listed.isEmpty { throw .smartCard(pcscError) }
      result.pcscProblem = pcscError
    }
    return result
  }

  /// The PC/SC half of `discover`; returns the error when PC/SC itself cannot be used. `otherTokens`: how many
  /// FIDO2 keys are being probed (with them, a lone card is one choice among several).
  /// The readers are listed and their states read once (one `SCardGetStatusChange` for all of them); then the
  /// cards are probed by up to `cardProbeThreads` threads (this one among them), each through a PC/SC context of
  /// its own (pcsc-lite serializes the calls of one context) and taking the next card when done, so eight cards
  /// take about two probes' time, not eight. A probe waits as long as another process holds its card (a
  /// transaction is a legitimate wait: that process may be asking its user for a PIN); the other threads go on
  /// with the other cards. Trace lines are collected per card and replayed in reader order.
  func discoverPCSC(into result: inout DiscoveryResult, otherTokens: Int = 0) -> SmartCardError? {
    let context: PCSCContext
    let readers: [String]
    do {
      context = try PCSCContext()
      readers = try context.readers()
    } catch {
      return error
    }
    // A reader that went away since the list fails the joint read: then each is read alone (it is empty).
    let states =
      (try? context.readerStates(readers)) ?? readers.map { (try? context.readerState($0)) ?? (false, []) }
    result.readerCount = readers.count
    var present: [(reader: String, atr: [UInt8])] = []
    for (reader, state) in zip(readers, states) {
      if state.present { present.append((reader, state.atr)) } else { result.emptyReaders.append(reader) }
    }
    let detailed = details || (onlyID == nil && present.count + otherTokens > 1)
    let identify = self.identify || detailed || onlyID != nil || present.count + otherTokens > 1
    let (includePUK, holdCards, onlyID, tracing) = (self.includePUK, self.holdCards, self.onlyID, trace != nil)
    let listing = !sessions
    let cards = present
    let outcomes = cards.map { _ in Handover<(PIVProbe, [String])>() }
    let probeCard: @Sendable (Int, PCSCContext?) -> Void = { i, own in
      let (reader, atr) = cards[i]
      outcomes[i].store(
        Self.probe(
          reader: reader, atr: atr, own: own, includePUK: includePUK, detailed: detailed, identify: identify,
          holdCards: holdCards, onlyID: onlyID, tracing: tracing, listing: listing))
    }
    let workers = min(cards.count, Self.cardProbeThreads)
    let next = Counter()
    let take: @Sendable () -> Int? = {
      let n = next.increment()
      return n < cards.count ? n : nil
    }
    for _ in 0..<max(0, workers - 1) {
      // pcsc-lite's client is not safe against a context released (or a card disconnected) in one thread while
      // another thread is inside it (HardwareNotes.md, PC/SC): so a probing thread never disconnects a card
      // (`PCSCCard.detach`), and it releases its context, when no session keeps it, before it hands over its
      // outcomes, that is before the caller goes on to disconnect anything.
      let started = POSIXThread.start {
        var own = try? PCSCContext()
        var done: [Int] = []
        while let i = take() {
          probeCard(i, own)
          done.append(i)
        }
        own = nil
        for i in done { outcomes[i].release() }
      }
      if !started { break }
    }
    // This thread probes too, through the context that listed the readers.
    while let i = take() {
      probeCard(i, context)
      outcomes[i].release()
    }
    for ((reader, _), outcome) in zip(cards, outcomes) {
      let (probe, lines) = outcome.wait()
      for line in lines { trace?(line) }
      switch probe {
      case .found(let t):
        t.session.card.trace = trace
        result.found.append(t)
      case .listed(let t): result.listed.append(t)
      case .noCard: result.emptyReaders.append(reader)
      case .unusable(let e): result.unusableCards.append(UnusableToken(reader: reader, reason: e))
      }
    }
    return nil
  }

  /// How many threads probe cards: a probe mostly waits on pcscd and the card, so more threads than CPUs pay while
  /// the waits are long (real readers), and cost while they are short: each thread is a thread start and a PC/SC
  /// context (3 more round trips to pcscd). Measured with 8 virtual cards on 2 CPUs (`tokens --json`, median):
  /// one thread 7.29 ms, 2: 6.00, 3: 5.77, 4: 5.56, one per card (8): 6.36.
  static let cardProbeThreads = max(4, 2 * Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))

  /// What one PIV probe found.
  enum PIVProbe {
    case found(DiscoveredToken)
    case listed(TokenInfo)
    case noCard
    case unusable(TokenError)
  }

  /// Connects to `reader` (through `own`, else a new context for this thread) and describes its card.
  static func probe(
    reader: String, atr: [UInt8], own: PCSCContext?, includePUK: Bool, detailed: Bool, identify: Bool = true,
    holdCards: Bool, onlyID: String?, tracing: Bool, listing: Bool = false
  ) -> (PIVProbe, [String]) {
    var lines: [String] = []
    do {
      let context = try own ?? PCSCContext()
      let card = try context.connect(reader, atr: atr)
      // Whatever ends this probe without a session, the card is let go, not disconnected (`PCSCCard.detach`).
      var kept = false
      defer { if !kept { card.detach() } }
      let session = PIVSession(transport: card)
      if tracing { session.card.trace = { lines.append($0) } }
      session.holdsCard = holdCards && !listing
      let info = try describe(
        session, reader: reader, includePUK: includePUK, detailed: detailed, identify: identify, onlyID: onlyID)
      session.card.trace = nil
      if listing { return (.listed(info), lines) }
      kept = true
      return (.found(DiscoveredToken(info: info, session: session, detailed: detailed)), lines)
    } catch let error as SmartCardError {
      if case .noCard = error { return (.noCard, lines) }
      return (.unusable(.smartCard(error)), lines)
    } catch let error as TokenError {
      return (.unusable(error), lines)
    } catch {
      return (.unusable(.malformedResponse(operation: "discovery")), lines)
    }
  }

  /// One card's `TokenInfo`. With `onlyID` (`--token`) a card that turns out to be another is not asked for
  /// its tries: its identity is all the command needs of it (to say it is not the one). Without `identify` the
  /// card is not asked who it is (`TokenDiscovery.identify`): it is named by its reader.
  static func describe(
    _ session: PIVSession, reader: String, includePUK: Bool, detailed: Bool = true, identify: Bool = true,
    onlyID: String? = nil
  ) throws(TokenError) -> TokenInfo {
    try session.transact { () throws(TokenError) -> TokenInfo in
      // Every card answers to its reader's id too: a run that did not ask the card who it is names it so (and a
      // message may suggest `--token` with that id), so `--token` with it must find the same card.
      let readerID = Self.readerID(reader)
      let byReader = onlyID == readerID
      let asked = identify && !(byReader && !detailed)  // a script's run named by reader: no need to ask
      let identity = asked ? try session.identity(chuid: .whenNoSerial, version: detailed) : PIVIdentity()
      let id: String
      if byReader {
        id = readerID
      } else if let serial = identity.serial {
        id = "piv-\(serial)"
      } else if let guid = identity.chuidGUID, guid.contains(where: { $0 != "0" }) {
        id = "piv-" + guid.prefix(12)
      } else {
        id = readerID
      }
      let wanted = onlyID == nil || onlyID == id
      let pin = wanted ? try session.pinStatus(.pin, detailed: detailed) : nil
      let puk = wanted && includePUK ? try? session.pinStatus(.puk) : nil
      // A card that answers GET SERIAL (or GET VERSION) is a YubiKey; the version is in the name when read.
      let yubico = identity.serial != nil || session.quirks.contains(.yubicoExtensions)
      let name =
        yubico ? "YubiKey \(identity.version ?? "")".trimmingSuffix() : asked ? "PIV card" : "PIV card in \(reader)"
      return TokenInfo(
        id: id, kind: .piv, name: name, reader: reader, capabilities: ["piv"], serial: identity.serial,
        version: identity.version, pin: pin, puk: puk)
    }
  }
}

extension TokenDiscovery {
  /// The id of whatever PIV card is in `reader` (`piv-<reader name>`, lower case, other characters as `-`).
  static func readerID(_ reader: String) -> String {
    "piv-" + String(reader.lowercased().map { $0.isLetter || $0.isNumber ? $0 : "-" })
  }
}

extension String {
  fileprivate func trimmingSuffix() -> String {
    var s = self
    while s.last == " " { s.removeLast() }
    return s
  }
}
