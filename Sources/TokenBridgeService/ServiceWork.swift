import DBus
import FoundationEssentials
import Platform
import TokenBridge

/// The service's methods as they run on their own threads: the library's operations, the same calls `uaf process`,
/// `oob` and `tokens` make (nothing here is a second implementation of a flow), with the outcome as D-Bus values.
public enum ServiceWork {
  /// What a worker needs of the service, read when the work starts.
  public struct Context: Sendable {
    public var configuration: Configuration
    /// Tokens an operation runs on now ("*": every token).
    public var busyTokens: Set<String>
    /// The tokens last found (by the running operation, or the last listing): while an operation runs, listings
    /// and policy checks answer from these (asking the tokens would wait for the operation, which holds them).
    public var seen: [TokenInfo]
    /// Told what a full listing found (the service keeps it as `seen`).
    public var found: @Sendable ([TokenInfo]) -> Void
    public init(
      configuration: Configuration, busyTokens: Set<String> = [], seen: [TokenInfo] = [],
      found: @escaping @Sendable ([TokenInfo]) -> Void = { _ in }
    ) {
      self.configuration = configuration
      self.busyTokens = busyTokens
      self.seen = seen
      self.found = found
    }
  }

  /// The tokens present: asked when no operation runs, else the ones last found (`token`: only that one).
  static func tokens(_ c: Context, token: String?) throws -> [TokenInfo] {
    guard c.busyTokens.isEmpty else { return c.seen.filter { token == nil || $0.sides.contains { $0.id == token } } }
    let infos = try TokenListing(trace: nil, id: token).tokens
    if token == nil { c.found(infos) }
    return infos
  }

  static func failure(_ error: Error) -> Outbox.Outcome {
    .failure(name: "Failed", code: UAFErrorCode(error), text: ErrorReport(error).message)
  }

  /// The authenticators present, each with whether it can serve and why not (Discover, ListTokens).
  static func authenticators(_ c: Context, token: String?) throws -> [DBusValue] {
    try tokens(c, token: token).flatMap(\.sides).map { t in
      let kind = t.kind.rawValue
      var reasons = ServiceSupport.hardwareReasons(t)
      if c.busyTokens.contains("*") || c.busyTokens.contains(t.id) {
        reasons.insert("busy: an operation is running on it", at: 0)
      }
      var d: [DBusValue.DictEntry] = [
        .init("aaid", .string(kind == "piv" ? c.configuration.pivAAID : c.configuration.fido2AAID)),
        .init("token", .string(t.id)), .init("kind", .string(kind)), .init("name", .string(displayable(t.name))),
        .init("usable", .bool(reasons.isEmpty)),
      ]
      if !reasons.isEmpty { d.append(.init("reason", .string(reasons.joined(separator: "; ")))) }
      return .dict(d)
    }
  }

  /// Discover: the Client API's DiscoveryData (docs/dbus-api.md, "Discover"), one Authenticator per token side
  /// present; what TokenBridge knows beyond it (token id, reader, usable and why not) is ListTokens'.
  static func discover(_ c: Context) -> Outbox.Outcome {
    let infos: [TokenInfo]
    do { infos = try tokens(c, token: nil) } catch { return failure(error) }
    let data = AuthenticatorProfile.discoveryData(infos, configuration: c.configuration)
    return .values([dbus(data)])
  }

  static func listTokens(_ c: Context, token: String?) -> Outbox.Outcome {
    do { return .values([.array(element: "a{sv}", try authenticators(c, token: token))]) } catch {
      return failure(error)
    }
  }

  /// checkPolicy: always a UAF code (never an error reply), never a prompt; while an operation runs, from the
  /// tokens last found, without asking any token.
  static func checkPolicy(_ c: Context, message: String, facet: String, token: String?) -> Outbox.Outcome {
    do {
      // A message breaking a rule is refused before any token is listed.
      try UAFEnvironment.validateRequest(Array(message.utf8))
      let env = try UAFEnvironment(configuration: c.configuration)
      if !c.busyTokens.isEmpty {
        let known = c.seen.flatMap(\.sides).filter { token == nil || $0.id == token }
        try env.checkPolicy(input: Array(message.utf8), facetID: facet, known: known)
        return .values([.uint32(UAFErrorCode.noError.rawValue)])
      }
      let tokens = try env.tokens(id: token, trace: nil, details: false, fido2Info: true) { _ in }
      if token == nil { c.found(tokens.infos) }
      try env.checkPolicy(input: Array(message.utf8), facetID: facet, tokens: tokens)
      return .values([.uint32(UAFErrorCode.noError.rawValue)])
    } catch {
      return .values([.uint32(UAFErrorCode(error).rawValue)])
    }
  }

  static func abandon(_ c: Context, keyID: String) -> Outbox.Outcome {
    do {
      try UAFEnvironment(configuration: c.configuration).abandonRegistration(keyID)
      return .values([])
    } catch { return failure(error) }
  }
}
