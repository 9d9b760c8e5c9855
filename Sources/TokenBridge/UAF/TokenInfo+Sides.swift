import TokenDevices

extension TokenInfo {
  /// A listing's physical token as the UAF authenticators it is: a PIV card and a FIDO2 key on one USB device
  /// (`USBIdentity.merge`) are two, each with its own id, kind (hence AAID) and PIN. Any other token is itself.
  public var sides: [TokenInfo] {
    guard let ids, let kinds, ids.count == kinds.count, ids.count > 1 else { return [self] }
    return zip(ids, kinds).map { id, kind in
      var side = self
      side.id = id
      side.kind = kind
      side.ids = nil
      side.kinds = nil
      side.fido2PIN = nil
      if kind == .fido2 {
        side.pin = fido2PIN
        side.puk = nil
      } else {
        side.fido2 = nil
      }
      return side
    }
  }
}
