import CFido2
import Synchronization

/// Cancels a session's operation that waits for a touch, from another thread (a Ctrl-C handler): CTAPHID_CANCEL
/// through `fido_dev_cancel` (libfido2 writes it on the operation's channel; the key then ends the operation with
/// KEEPALIVE_CANCEL). One per session, no global: the device is armed only while such an operation runs, and the
/// lock keeps the session from closing it during a cancel. The handle is kept as its address (a plain integer is
/// Sendable; the pointer type is not).
public final class FIDO2Canceller: Sendable {
  let device = Mutex<UInt?>(nil)

  func arm(_ dev: OpaquePointer) {
    let address = UInt(bitPattern: dev)
    device.withLock { $0 = address }
  }

  func disarm() { device.withLock { $0 = nil } }

  /// Cancels the waiting operation, if one runs; returns whether one did.
  @discardableResult
  public func cancel() -> Bool {
    device.withLock { address in
      guard let address, let dev = OpaquePointer(bitPattern: address) else { return false }
      return fido_dev_cancel(dev) == FIDO_OK
    }
  }
}
