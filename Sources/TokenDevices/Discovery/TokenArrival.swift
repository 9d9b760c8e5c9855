import Dispatch
import FoundationEssentials

extension TokenDiscovery {
  /// The token in `reader` as discovery describes it (one transaction: SELECT, version, serial or CHUID, PIN
  /// tries read without spending one), the card let go afterwards.
  public static func identifyCard(in reader: String) throws(TokenError) -> TokenInfo {
    let context: PCSCContext
    let card: PCSCCard
    do {
      context = try PCSCContext()
      card = try context.connect(reader)
    } catch { throw .smartCard(error) }
    return try withExtendedLifetime(context) { () throws(TokenError) -> TokenInfo in
      try describe(PIVSession(transport: card, trace: nil), reader: reader, includePUK: false)
    }
  }

  /// The discovery id of the FIDO2 key at `path` (a hidraw node or a virtual key's socket).
  public static func fido2ID(path: String) -> String {
    fido2ID(FIDO2DeviceRef(path: path, product: "", isVirtual: false))
  }
}

/// Waits for a token to arrive: a card inserted or a reader added (PC/SC), pcscd coming back, a FIDO2 key's node
/// appearing or becoming usable. Event-driven (`PCSCWatcher`, `FIDONodeEvents`); `TokenWait` looks again every few
/// seconds besides, for the one arrival PC/SC gives no event for.
///
/// Make it *before* looking for the token (discovery): an arrival while discovery runs is then not missed.
public final class TokenArrival: Sendable {
  let pcsc = PCSCWatcher()
  let nodes: FIDONodeEvents
  let arrived = DispatchSemaphore(value: 0)

  public init(virtualFIDO2Paths: [String]? = nil) {
    nodes = FIDONodeEvents(virtualPaths: virtualFIDO2Paths)
    let signal = arrived
    pcsc.start { event in
      switch event {
      case .cardInserted, .readerAdded, .serviceBack: signal.signal()
      case .cardRemoved, .readerRemoved, .serviceLost: break
      }
    }
    nodes.start { event in
      switch event {
      case .added, .changed: signal.signal()
      case .removed: break
      }
    }
  }

  deinit {
    pcsc.stop()
    nodes.stop()
  }

  /// True when something arrived before `deadline` (look again), false when the deadline passed.
  public func wait(until deadline: DispatchTime) -> Bool {
    arrived.wait(timeout: deadline) == .success
  }
}
