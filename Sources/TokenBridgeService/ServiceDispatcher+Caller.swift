import DBus
import Glibc
import TokenBridge

extension ServiceDispatcher {
  /// The caller's identity from the bus (its uid must be ours) and its process; nil when refused (replied).
  func caller(_ call: any BusCall) -> CallerIdentity? {
    guard let sender = call.sender else {
      replyError(call, "AccessDenied", .authenticatorAccessDenied, "a message without a sender")
      return nil
    }
    if let known = identities[sender] { return known }
    let credentials: DBusValue
    do { credentials = try bus.credentials(of: sender) } catch {
      replyError(call, "UntrustedFacetId", .untrustedFacetID, "the bus did not say who is calling (\(error))")
      return nil
    }
    guard case .uint32(let callerUID)? = credentials["UnixUserID"], callerUID == uid else {
      replyError(call, "AccessDenied", .authenticatorAccessDenied, "a caller of another user is refused")
      return nil
    }
    guard let identity = identify(credentials) else {
      replyError(call, "UntrustedFacetId", .untrustedFacetID, "the calling process cannot be identified")
      return nil
    }
    identities[sender] = identity
    return identity
  }

  /// The facet ID to act for: the caller's, or the origin it passed when it may (`serviceOriginCallers`); nil when
  /// refused (replied).
  func facet(_ call: any BusCall, _ identity: CallerIdentity, _ options: DBusValue) -> String? {
    switch Self.facet(of: identity, options: options, originCallers: configuration.serviceOriginCallers) {
    case .success(let facet): return facet
    case .failure(let refusal):
      replyError(call, refusal.name, refusal.code, refusal.text)
      return nil
    }
  }

  /// Why a caller may not act as it asked: the error reply's name, code and text.
  public struct Refusal: Error, Equatable {
    public var name: String
    public var code: UAFErrorCode
    public var text: String
  }

  /// The facet a caller acts for: its own facet ID; with `options["origin"]`, that origin, only for a caller
  /// listed in `originCallers` and only an `https://host[:port]` origin (`http://` on loopback).
  public static func facet(of identity: CallerIdentity, options: DBusValue, originCallers: [String]) -> Result<
    String, Refusal
  > {
    guard let origin = options["origin"] else { return .success(identity.facetID) }
    guard originCallers.contains(identity.facetID) else {
      return .failure(
        Refusal(
          name: "AccessDenied", code: .authenticatorAccessDenied,
          text: "\(identity.facetID) may not act for a web origin (serviceOriginCallers)"))
    }
    guard case .string(let text) = origin, ServiceSupport.isOrigin(text) else {
      return .failure(
        Refusal(
          name: "InvalidArgs", code: .protocolError,
          text: "origin must be https://host[:port] (http:// on loopback only)"))
    }
    return .success(text)
  }

  /// A caller left the bus (`NameOwnerChanged` of a unique name to no owner): its requests are cancelled.
  func nameOwnerChanged(_ signal: any BusCall) -> Bool {
    guard let args = try? signal.arguments(), args.count == 3, case .string(let name) = args[0],
      case .string(let newOwner) = args[2], name.hasPrefix(":"), newOwner.isEmpty
    else { return false }
    callerLeft(name)
    return false
  }

  public func callerLeft(_ name: String) {
    identities[name] = nil
    answered = answered.filter { $0.value.sender != name }
    for r in requests.values where r.sender == name { r.control.cancel() }
  }
}

extension CallerIdentity {
  /// The identity of the process bus credentials name: through its pidfd (`ProcessFD`) when the bus gives one,
  /// else its pid (`ProcessID`), whose start time must not change while its files are read.
  public static func of(credentials: DBusValue) -> CallerIdentity? {
    if case .fd(let pidfd)? = credentials["ProcessFD"], pidfd >= 0 {
      defer { close(pidfd) }
      guard let pid = Self.pid(ofPidfd: pidfd), let id = Self.of(pid: Int32(pid)), Self.isAlive(pidfd: pidfd)
      else { return nil }
      return id
    }
    guard case .uint32(let pid)? = credentials["ProcessID"], pid > 0 else { return nil }
    guard let before = Self.startTime(pid: Int32(pid)), let id = Self.of(pid: Int32(pid)),
      Self.startTime(pid: Int32(pid)) == before
    else { return nil }
    return id
  }
}
