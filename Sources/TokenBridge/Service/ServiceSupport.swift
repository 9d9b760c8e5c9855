import FoundationEssentials
import TokenDevices
import UAFCore

/// What `tokenbridge serve` needs of the UAF client's own judgements (so it says what the CLI says).
public enum ServiceSupport {
  /// What keeps a token from serving at all, whatever a policy says (a blocked PIN, a FIDO2 key without
  /// hmac-secret): the reasons a registration choice lists.
  public static func hardwareReasons(_ t: TokenInfo) -> [String] { SelectionCandidate.hardwareProblems(t) }

  /// What the CLI says when pcscd runs but does not answer: the report the service gives a call whose work did
  /// not end within its deadline.
  public static var tokensDoNotAnswer: ErrorReport {
    ErrorReport(OperationError.token(.smartCard(.serviceUnresponsive)))
  }
}

extension ServiceSupport {
  /// A web origin a privileged caller may act for: `https://host[:port]` (`http://` on loopback only), nothing
  /// after it.
  public static func isOrigin(_ s: String) -> Bool {
    guard let u = URL(string: s), let host = u.host, !host.isEmpty, u.path.isEmpty, u.query == nil,
      u.fragment == nil, u.user == nil
    else { return false }
    return u.scheme == "https" || (u.scheme == "http" && LoopbackHost.isLoopback(host))
  }

  /// The origin of the appID of a request message (an envelope or the bare array), to name the server in the
  /// dialogs; nil when it has none (the facet is then the server).
  public static func appIDOrigin(_ message: String) -> String? {
    struct Request: Decodable {
      struct Header: Decodable { var appID: String? }
      var header: Header
    }
    guard let text = UAFEnvelope.message(message),
      let list = try? JSONDecoder().decode([Request].self, from: Data(text.utf8)),
      let appID = list.first?.header.appID, let url = URL(string: appID), let scheme = url.scheme, let host = url.host
    else { return nil }
    return "\(scheme)://\(host)" + (url.port.map { ":\($0)" } ?? "")
  }
}
