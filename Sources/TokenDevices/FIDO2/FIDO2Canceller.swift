import CFido2
import Synchronization

/// Cancels a session's operation that waits for a touch, from another thread (a Ctrl-C handler):
/// CTAPHID_CANCEL through `fido_dev_cancel`, or through the session's own channel (`CTAP2Link.cancel`). One per
/// session, no global: a target is armed only while an operation runs, and the lock keeps the session from closing
/// it during a cancel. A libfido2 handle is kept as its address (a plain integer is Sendable; the pointer type is
/// not).
public final class FIDO2Canceller: Sendable {
  enum Target {
    case none
    case device(UInt)
    case link(CTAP2Link)
  }
  let target = Mutex<Target>(.none)

  func arm(_ dev: OpaquePointer) {
    let address = UInt(bitPattern: dev)
    target.withLock { $0 = .device(address) }
  }

  func arm(_ link: CTAP2Link) { target.withLock { $0 = .link(link) } }

  func disarm() { target.withLock { $0 = .none } }

  /// Cancels the waiting operation, if one runs; returns whether one did.
  @discardableResult
  public func cancel() -> Bool {
    target.withLock { t in
      switch t {
      case .none: return false
      case .device(let address):
        guard let dev = OpaquePointer(bitPattern: address) else { return false }
        fido_dev_cancel(dev)
        return true
      case .link(let link): return link.cancel()
      }
    }
  }
}
