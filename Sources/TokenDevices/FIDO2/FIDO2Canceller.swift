import CFido2
import Dispatch
import Synchronization

/// Cancels a session's operation that waits for a touch, from another thread (a Ctrl-C handler): CTAPHID_CANCEL
/// through `fido_dev_cancel` (libfido2 writes it on the operation's channel; the key then ends the operation with
/// KEEPALIVE_CANCEL). One per session, no global: the device is armed only while such an operation runs, and the
/// lock keeps the session from closing it during a cancel. The handle is kept as its address (a plain integer is
/// Sendable; the pointer type is not).
///
/// A key that does not answer the cancel (it dropped the request, or stopped answering) would keep the call, and
/// whoever waits on the token, until the call's deadline (90 s for a touch): once `abandonGrace` has passed after a
/// cancel, the session's reads give up and the call ends as cancelled (`abandonDue`). A key that answers the cancel
/// (KEEPALIVE_CANCEL, within milliseconds) ends it before that.
public final class FIDO2Canceller: Sendable {
  let device = Mutex<UInt?>(nil)
  /// When the running operation was cancelled (uptime nanoseconds); 0: it was not.
  let cancelledAt = Atomic<UInt64>(0)
  static let abandonGrace: UInt64 = 1_000_000_000

  func arm(_ dev: OpaquePointer) {
    let address = UInt(bitPattern: dev)
    device.withLock { $0 = address }
    cancelledAt.store(0, ordering: .relaxed)
  }

  func disarm() { device.withLock { $0 = nil } }

  /// Cancels the waiting operation, if one runs; returns whether one did.
  @discardableResult
  public func cancel() -> Bool {
    device.withLock { address in
      guard let address, let dev = OpaquePointer(bitPattern: address) else { return false }
      _ = cancelledAt.compareExchange(
        expected: 0, desired: max(1, DispatchTime.now().uptimeNanoseconds), ordering: .relaxed)
      return fido_dev_cancel(dev) == FIDO_OK
    }
  }

  /// A cancel came and the key has not ended the operation within the grace: stop waiting for it.
  var abandonDue: Bool {
    let at = cancelledAt.load(ordering: .relaxed)
    return at != 0 && DispatchTime.now().uptimeNanoseconds >= at &+ Self.abandonGrace
  }
}
