import FoundationEssentials

extension ErrorReport {
  /// The device and dispatch-target service errors (device change/check/sync, pending).
  static func device(_ e: DeviceServiceError) -> ErrorReport {
    switch e {
    case .noDeviceInformation:
      return .init(
        status: .unknownKey,
        message: "There is no device information on this machine yet: register a token first (tokenbridge register).")
    case .noDispatchTarget(let s):
      return .init(
        status: .unknownKey,
        message: "The server \(shown(s)) knows no dispatch target of this device, so it cannot be asked; "
          + "run tokenbridge device sync.")
    case .signatureRefused(let s):
      return .init(
        status: .serverRefused,
        message: "The server \(shown(s)) refused this device's signature (bad, replayed or stale request); "
          + "check the clock, then run tokenbridge device check.", code: "HTTP 401")
    case .nameAlreadyExists(let name, let s):
      return .init(
        status: .serverRefused,
        message: "The server \(shown(s)) already has a device named \"\(shown(name))\" for this user; choose another "
          + "name.", code: "HTTP 422")
    case .notFound(let id, let s):
      return .init(
        status: .serverRefused,
        message: "The server \(shown(s)) does not know \(shown(id)); run tokenbridge device check.", code: "HTTP 404")
    case .unsafeTargetID(let id, let s):
      return .init(
        status: .serverRefused,
        message: "The server \(shown(s)) named a dispatch target \"\(shown(id))\", which is a URL dot-segment: a "
          + "request about it would reach another resource, so it is neither kept nor used. Ask the server's "
          + "operator to give dispatch targets other ids.")
    case .operationNotFound(let id):
      return .init(
        status: .payloadTokenExpired,
        message: "No pending operation \(shown(id)): it was processed or timed out (tokenbridge pending lists them).")
    case .backend(let b): return backend(b)
    case .localData(let l): return localData(l)
    }
  }
}
