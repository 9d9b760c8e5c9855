import Dispatch
import FoundationEssentials
import TokenDevices

/// `--wait`: a command that needs a token and finds none waits for one (PC/SC card or reader events, pcscd coming
/// back, FIDO2 device nodes: `TokenArrival`; a look again every 3 s besides) instead of failing, up to `seconds`;
/// then it fails as timed out (exit 14). Without it a command fails at once, as before (scripts rely on that).
public struct TokenWait: Sendable {
  public var seconds: Double
  /// Told once, when the wait begins ("insert your token").
  public var insertToken: @Sendable (_ id: String?) -> Void
  /// Told when a token arrived and the command goes on.
  public var arrived: @Sendable () -> Void

  public init(
    seconds: Double, insertToken: @escaping @Sendable (String?) -> Void, arrived: @escaping @Sendable () -> Void = {}
  ) {
    self.seconds = seconds
    self.insertToken = insertToken
    self.arrived = arrived
  }

  /// How often a wait looks again without an event (see `retrying`).
  var relookSeconds = 3.0

  /// Errors that mean "the token is not here (yet)": worth waiting for an arrival.
  static func isAbsence(_ e: OperationError) -> Bool {
    switch e {
    case .noToken, .tokenNotFound: true
    case .token(.smartCard(.serviceUnavailable)), .token(.smartCard(.noReaders)): true
    // Every token there was pulled out while discovery probed it (`TokenSelection.pulled`): the attempt is only the
    // discovery, so nothing was begun on it; for a command that waits, that is no token yet. (Seen: `pin set
    // --wait` met the CCID reader pcscd was still removing before the FIDO2 key it waited for was there, and
    // ended "removed" with exit 10.)
    case .token(.smartCard(.cardRemoved)): true
    default: false
    }
  }

  /// Runs `attempt` (a discovery); while it fails for want of a token, waits for one to arrive and runs it again.
  func retrying<T>(id: String?, _ attempt: () throws(OperationError) -> T) throws(OperationError) -> T {
    let deadline = DispatchTime.now() + seconds
    var told = false
    while true {
      let arrival = TokenArrival()  // before the attempt: an arrival while it runs is not missed
      do {
        let found = try attempt()
        if told { arrived() }
        return found
      } catch {
        guard Self.isAbsence(error) else { throw error }
        if !told {
          insertToken(id)
          told = true
        }
        // Events first; a look again every `relookSeconds` as well, because one arrival gives no PC/SC event: a
        // USB reader pcscd replaces under the same name (pulled and plugged back in while pcscd was still letting
        // the old one go) with a card whose event counter equals the old card's (HardwareNotes.md, "Hotplug").
        let relook = DispatchTime.now() + relookSeconds
        if !arrival.wait(until: min(deadline, relook)) && DispatchTime.now() >= deadline { throw .timedOut }
      }
    }
  }
}

extension Optional where Wrapped == TokenWait {
  /// `attempt` once (no wait asked), or retried as `TokenWait.retrying` says.
  func run<T>(id: String?, _ attempt: () throws(OperationError) -> T) throws(OperationError) -> T {
    guard let wait = self else { return try attempt() }
    return try wait.retrying(id: id, attempt)
  }
}
