import FoundationEssentials

/// TrustedFacets list (UAF AppID and Facet Specification §3.1.2).
public struct TrustedFacetsList: Codable, Equatable, Sendable {
  public struct Entry: Codable, Equatable, Sendable {
    public var version: Version
    public var ids: [String]
    public init(version: Version, ids: [String]) {
      self.version = version
      self.ids = ids
    }
  }
  public var trustedFacets: [Entry]
  public init(trustedFacets: [Entry]) { self.trustedFacets = trustedFacets }
}

public enum FacetCheckError: Error, Equatable, Sendable {
  /// Our facet is not in the appID's list (UNTRUSTED_FACET_ID).
  case untrustedFacet(facetID: String, appID: String)
  /// The appID is neither empty, our own facet, nor an https URL.
  case invalidAppID(String)
  /// The trusted-facets list could not be fetched or read.
  case facetListUnavailable(String)
}

/// The client side of the AppID and facet check (UAF AppID and Facet Specification §3.1.3).
/// Fetching is injected (the caller does HTTPS and the redirect rule); this is the decision.
public enum FacetCheck {
  /// Returns the appID to put into FinalChallengeParams.
  /// `allowLoopbackHTTP`: accept an `http://` appID on a loopback host (127.0.0.0/8, ::1, localhost), for
  /// a relying party on this machine (tests, demo). The spec wants https; anything else is still refused.
  public static func check(
    appID: String?, facetID: String, upv: Version, allowLoopbackHTTP: Bool = false,
    fetch: (URL) throws -> TrustedFacetsList
  ) throws(FacetCheckError) -> String {
    guard let appID, !appID.isEmpty else { return facetID }  // empty appID: our facet
    if appID == facetID { return appID }
    guard let url = URL(string: appID), let appHost = url.host,
      url.scheme == "https" || (allowLoopbackHTTP && url.scheme == "http" && isLoopback(appHost))
    else {
      throw .invalidAppID(appID)
    }
    let list: TrustedFacetsList
    do { list = try fetch(url) } catch { throw .facetListUnavailable("\(error)") }
    guard let entry = list.trustedFacets.first(where: { $0.version == upv }) else {
      throw .untrustedFacet(facetID: facetID, appID: appID)
    }
    let ids = entry.ids.filter { id in
      guard id.hasPrefix("https://") || id.hasPrefix("http://") else { return true }
      guard let host = URL(string: id)?.host else { return false }
      return registrableDomain(host) == registrableDomain(appHost)
    }
    guard ids.contains(facetID) else { throw .untrustedFacet(facetID: facetID, appID: appID) }
    return appID
  }

  static func isLoopback(_ host: String) -> Bool { LoopbackHost.isLoopback(host) }

  /// The last two labels of a host (an IP address or "localhost" stays whole). Without the Public Suffix
  /// List this is stricter than eTLD+1 for hosts like x.co.uk (see HardwareNotes.md/README).
  static func registrableDomain(_ host: String) -> String {
    let labels = host.lowercased().split(separator: ".")
    if labels.count <= 2 || labels.allSatisfy({ Int($0) != nil }) { return host.lowercased() }
    return labels.suffix(2).joined(separator: ".")
  }
}

/// Transaction content (UAF Protocol §3.5.3): what is shown, and the bytes TRANSACTION_CONTENT_HASH covers.
public enum TransactionContent {
  public enum Problem: Error, Equatable, Sendable {
    case notBase64URL
    case unsupportedType(String)
    case notUTF8
  }

  /// The text/plain transaction to show, with its decoded bytes (hash these). image/png is refused: this
  /// client cannot show images.
  public static func text(_ t: Transaction) throws(Problem) -> (text: String, bytes: [UInt8]) {
    guard t.contentType == "text/plain" else { throw .unsupportedType(t.contentType) }
    guard let bytes = Base64URL.decodeUnpadded(t.content) else { throw .notBase64URL }
    guard let s = String(validating: bytes, as: UTF8.self) else { throw .notUTF8 }
    return (s, bytes)
  }

  /// The transaction text as it may be shown: `UntrustedText.displayable(_:layout: .multiLine)` (controls,
  /// bidi and invisible characters as visible escapes; newline and tab kept). Hash `text(_:).bytes`, never this.
  public static func sanitized(_ s: String) -> String {
    UntrustedText.displayable(s, layout: .multiLine)
  }
}
