import Dispatch
import Glibc
import Platform

/// PIV cards: every reader, and for each card a probe in one transaction: SELECT, GET SERIAL (CHUID only when
/// there is no serial), PIN status; with `details` (or several tokens) also GET VERSION and the PIN's
/// metadata, and the PUK status when `includePUK`. PIN status is read without spending a try.
extension TokenDiscovery {
  /// The PC/SC half of `discover`; returns the error when PC/SC itself cannot be used. `otherTokens`: how many
  /// FIDO2 keys are being probed (with them, a lone card is one choice among several).
  /// The readers are listed and their states read once (one `SCardGetStatusChange` for all of them); then the
  /// cards are probed by up to `cardProbeThreads` threads (this one among them), each through a PC/SC context of
  /// its own (pcsc-lite serializes the calls of one context) and taking the next card when done, so eight cards
  /// take about two probes' time, not eight. A probe waits as long as another process holds its card (a
  /// transaction is a legitimate wait: that process may be asking its user for a PIN); the other threads go on
  /// with the other cards. Trace lines are collected per card and replayed in reader order.
  ///
  /// No card is held while a probe waits for another: with several cards each probe ends its transaction, and
  /// `holdCards` takes effect at the session's first operation after discovery (which SELECTs again). Holding the
  /// probed cards while waiting for the rest deadlocked processes that probed the same cards in another order
  /// (HardwareNotes.md, PC/SC). A lone card is kept from its probe on: there is no other card to wait for.
  /// Every probing thread has left pcsc-lite before this returns (its context released, or kept by a session).
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
    for (reader, state) in zip(readers, states) where cardReaders?.contains(reader) ?? true {
      if state.present { present.append((reader, state.atr)) } else { result.emptyReaders.append(reader) }
    }
    let detailed = details || (onlyID == nil && present.count + otherTokens > 1)
    let identify = self.identify || detailed || onlyID != nil || present.count + otherTokens > 1
    let (includePUK, onlyID, tracing) = (self.includePUK, self.onlyID, trace != nil)
    let listing = !sessions
    let cards = present
    let holdWhileProbing = holdCards && cards.count == 1
    let outcomes = cards.map { _ in Handover<(PIVProbe, [String])>() }
    let probeCard: @Sendable (Int, PCSCContext?) -> Void = { i, own in
      let (reader, atr) = cards[i]
      outcomes[i].store(
        Self.probe(
          reader: reader, atr: atr, own: own, includePUK: includePUK, detailed: detailed, identify: identify,
          holdCards: holdWhileProbing, onlyID: onlyID, tracing: tracing, listing: listing))
    }
    let workers = min(cards.count, Self.cardProbeThreads)
    let next = Counter()
    let take: @Sendable () -> Int? = {
      let n = next.increment()
      return n < cards.count ? n : nil
    }
    let finished = DispatchSemaphore(value: 0)
    var started = 0
    for _ in 0..<max(0, workers - 1) {
      // pcsc-lite's client is not safe against a context released (or a card disconnected) in one thread while
      // another thread is inside it, nor against the library's exit-time destructor freeing its list of contexts
      // while a thread still walks it (HardwareNotes.md, PC/SC): so a probing thread never disconnects a card
      // (`PCSCCard.detach`), establishes its context only once it has a card to probe, releases it (when no session
      // keeps it) before it hands over its outcomes, and says when it is done; the caller waits for that.
      let ok = POSIXThread.start {
        var own: PCSCContext?
        var done: [Int] = []
        while let i = take() {
          if own == nil { own = try? PCSCContext() }
          probeCard(i, own)
          done.append(i)
        }
        own = nil
        for i in done { outcomes[i].release() }
        finished.signal()
      }
      if !ok { break }
      started += 1
    }
    // This thread probes too, through the context that listed the readers.
    while let i = take() {
      probeCard(i, context)
      outcomes[i].release()
    }
    for _ in 0..<started { finished.wait() }
    for ((reader, _), outcome) in zip(cards, outcomes) {
      let (probe, lines) = outcome.wait()
      for line in lines { trace?(line) }
      switch probe {
      case .found(let t):
        t.session.card.trace = trace
        t.session.holdsCard = holdCards
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
  /// context (3 more round trips to pcscd). Twice the CPUs, at least 4: docs/performance.md has the measurement.
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
