import Synchronization
import Prompts
import TokenBridge

/// A request's cancellation: Close, or its caller leaving the bus. Ends a pinentry dialog at once and sends
/// CTAPHID_CANCEL to a FIDO2 key waiting for a touch.
public final class RequestControl: Sendable {
  let cancelled = Mutex(false)
  let pinentry = Mutex<PinentryCancellation?>(nil)
  let cancellers = Mutex<[Canceller]>([])

  public var isCancelled: Bool { cancelled.withLock { $0 } }

  public func cancel() {
    cancelled.withLock { $0 = true }
    pinentry.withLock { $0?.requestNow() }
    for c in cancellers.withLock({ $0 }) { _ = c.cancel() }
  }

  /// The dialog of this request: cancelled at once if the request already is.
  public func attach(_ p: PinentryCancellation) {
    pinentry.withLock { $0 = p }
    if isCancelled { p.requestNow() }
  }

  public func attach(_ list: [Canceller]) {
    cancellers.withLock { $0 = list }
    if isCancelled { for c in list { _ = c.cancel() } }
  }
}
