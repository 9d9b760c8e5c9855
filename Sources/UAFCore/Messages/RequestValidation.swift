/// The bounds the UAF Protocol spec puts on request fields (FIDO UAF Protocol v1.1 §3.1 and the request
/// dictionaries of §3.4.1, §3.5.1, §3.6.1). Checked when a request is decoded, before any token is touched.
public enum UAFBounds {
  /// ServerChallenge: base64url(byte[8...64]) (§3.1.6; at least 8 bytes, at most 64 so a SHA-512 fits).
  public static let challengeBytes = 8...64
  /// KeyID: base64url(byte[32...2048]) (§3.1.5).
  public static let keyIDBytes = 32...2048
  /// OperationHeader.appID: string[0..512] (§3.1.3).
  public static let appIDLength = 0...512
  /// OperationHeader.serverData: string[1..1536] when present (§3.1.3).
  public static let serverDataLength = 1...1536
  /// RegistrationRequest.username: string[1..128] (§3.4.1).
  public static let usernameLength = 1...128
  /// Extension.id: string[1..32] (§3.1.12).
  public static let extensionIDLength = 1...32
  /// Extension.data: base64url, "MAY be empty" (§3.1.12); capped at the base64url length of 8192 bytes, the
  /// bound of the UAF 1.0 drafts (no request needs more; the message is capped at 1 MiB anyway).
  public static let extensionDataLength = 0...10_923
  /// Version.major/minor: unsigned short (§3.1.1).
  public static let versionComponent = 0...0xFFFF
  /// Transaction.content: base64url(byte[1...]) (§3.5.1).
  public static let transactionContentMinBytes = 1
  /// Transaction.contentType: non-empty.
  public static let contentTypeLength = 1...256
}

/// Collects the first violated bound of a request (the check stops there).
struct RequestValidator {
  let index: Int

  func fail(_ field: String, _ rule: UAFFieldRule) -> UAFMessageError {
    .invalidField(request: index, field: field, rule: rule)
  }

  func length(_ s: String, _ bounds: ClosedRange<Int>, _ field: String) throws(UAFMessageError) {
    // DOMString lengths are UTF-16 code units; counting stops early on huge input.
    guard bounds.contains(s.utf16.count) else {
      throw fail(field, .length(min: bounds.lowerBound, max: bounds.upperBound))
    }
  }

  func base64URL(_ s: String, _ bytes: ClosedRange<Int>?, min: Int = 0, _ field: String) throws(UAFMessageError) {
    let rule = UAFFieldRule.base64URL(minBytes: bytes?.lowerBound ?? min, maxBytes: bytes?.upperBound)
    // Refuse by length before decoding: 4 characters carry 3 bytes.
    if let bytes, s.utf8.count > (bytes.upperBound + 2) / 3 * 4 + 2 { throw fail(field, rule) }
    guard let decoded = Base64URL.decode(s), decoded.count >= (bytes?.lowerBound ?? min),
      decoded.count <= (bytes?.upperBound ?? Int.max)
    else { throw fail(field, rule) }
  }

  func aaid(_ s: String, _ field: String) throws(UAFMessageError) {
    guard isValidAAID(s) else { throw fail(field, .aaid) }
  }

  func keyID(_ s: String, _ field: String) throws(UAFMessageError) {
    try base64URL(s, UAFBounds.keyIDBytes, field)
  }

  func version(_ v: Version, _ field: String) throws(UAFMessageError) {
    let r = UAFBounds.versionComponent
    guard r.contains(v.major) else { throw fail(field + ".major", .range(min: r.lowerBound, max: r.upperBound)) }
    guard r.contains(v.minor) else { throw fail(field + ".minor", .range(min: r.lowerBound, max: r.upperBound)) }
  }

  func extensions(_ exts: [Extension]?, _ field: String) throws(UAFMessageError) {
    for (i, e) in (exts ?? []).enumerated() {
      try length(e.id, UAFBounds.extensionIDLength, "\(field)[\(i)].id")
      try length(e.data, UAFBounds.extensionDataLength, "\(field)[\(i)].data")
    }
  }

  func header(_ h: OperationHeader) throws(UAFMessageError) {
    try version(h.upv, "header.upv")
    if let appID = h.appID { try length(appID, UAFBounds.appIDLength, "header.appID") }
    if let serverData = h.serverData { try length(serverData, UAFBounds.serverDataLength, "header.serverData") }
    try extensions(h.exts, "header.exts")
  }

  func criteria(_ c: MatchCriteria, _ field: String) throws(UAFMessageError) {
    for (i, a) in (c.aaid ?? []).enumerated() { try aaid(a, "\(field).aaid[\(i)]") }
    for (i, v) in (c.vendorID ?? []).enumerated() {
      guard v.utf8.count == 4, v.utf8.allSatisfy(isASCIIHexDigit) else {
        throw fail("\(field).vendorID[\(i)]", .vendorID)
      }
    }
    for (i, k) in (c.keyIDs ?? []).enumerated() { try keyID(k, "\(field).keyIDs[\(i)]") }
    try extensions(c.exts, "\(field).exts")
  }

  func policy(_ p: Policy) throws(UAFMessageError) {
    for (i, group) in p.accepted.enumerated() {
      for (j, c) in group.enumerated() { try criteria(c, "policy.accepted[\(i)][\(j)]") }
    }
    for (i, c) in (p.disallowed ?? []).enumerated() { try criteria(c, "policy.disallowed[\(i)]") }
  }

  func request(_ r: UAFRequest) throws(UAFMessageError) {
    try header(r.header)
    switch r {
    case .registration(let reg):
      try base64URL(reg.challenge, UAFBounds.challengeBytes, "challenge")
      try length(reg.username, UAFBounds.usernameLength, "username")
      try policy(reg.policy)
    case .authentication(let auth):
      try base64URL(auth.challenge, UAFBounds.challengeBytes, "challenge")
      for (i, t) in (auth.transaction ?? []).enumerated() {
        try length(t.contentType, UAFBounds.contentTypeLength, "transaction[\(i)].contentType")
        try base64URL(t.content, nil, min: UAFBounds.transactionContentMinBytes, "transaction[\(i)].content")
      }
      try policy(auth.policy)
    case .deregistration(let dereg):
      let uaf11 = dereg.header.upv != .uaf10
      for (i, a) in dereg.authenticators.enumerated() {
        let field = "authenticators[\(i)]"
        if a.aaid.isEmpty || a.keyID.isEmpty {
          guard uaf11 else { throw fail(field, .wildcardNeedsUAF11) }
        }
        if a.aaid.isEmpty {
          guard a.keyID.isEmpty else { throw fail(field + ".keyID", .keyIDWithoutAAID) }
        } else {
          try aaid(a.aaid, field + ".aaid")
        }
        if !a.keyID.isEmpty { try keyID(a.keyID, field + ".keyID") }
      }
    }
  }
}
