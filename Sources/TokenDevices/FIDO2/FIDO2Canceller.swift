import Synchronization

/// Cancels a session's operation that waits for a touch, from another thread (a Ctrl-C handler): CTAPHID_CANCEL
/// on the session's own channel (`CTAP2Link.cancel`; every call that waits for a touch goes over it). One per
/// session, no global: the channel is armed only while such an operation runs, and the lock keeps the session from
/// closing it during a cancel.
public final class FIDO2Canceller: Sendable {
  let link = Mutex<CTAP2Link?>(nil)

  func arm(_ link: CTAP2Link) { self.link.withLock { $0 = link } }

  func disarm() { link.withLock { $0 = nil } }

  /// Cancels the waiting operation, if one runs; returns whether one did.
  @discardableResult
  public func cancel() -> Bool { link.withLock { $0?.cancel() ?? false } }
}
