import Dispatch
import Platform

/// FIDO2 keys: each probed through libfido2 by a thread of its own, bounded by its deadlines.
extension TokenDiscovery {
  /// The discovery id of a FIDO2 key: `fido2-<socket name>` for virtual keys, `fido2-<hidraw name>` otherwise
  /// (CTAP has no serial number; see HardwareNotes.md). Known without opening the key.
  public static func fido2ID(_ ref: FIDO2DeviceRef) -> String {
    let name = PathString.last(ref.path)  // not a URL (docs/performance.md)
    return "fido2-" + String(name.lowercased().map { $0.isLetter || $0.isNumber ? $0 : "-" })
  }

  /// What one FIDO2 probe found, handed from the probing thread to the caller.
  enum FIDO2Probe {
    case found(DiscoveredFIDO2)
    case listed(TokenInfo)
    case unusable(UnusableToken)
  }

  /// The hand-over point between one probing thread and `collect` (the outcome and its trace lines): the outcome
  /// holds a non-Sendable `FIDO2Session` that moves from the probing thread (which has no use of it after `put`) to
  /// `collect`, which waits for it until a deadline (`Handover.wait(until:)`).
  typealias ProbeOutcome = Handover<(FIDO2Probe, [String])>

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
      guard let (probe, lines) = p.outcome.wait(until: end) else {
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
}
