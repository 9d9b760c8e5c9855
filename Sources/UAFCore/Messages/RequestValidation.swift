/// The bounds the UAF Protocol spec puts on request fields (FIDO UAF Protocol v1.1 §3.1 and the request
/// dictionaries of §3.4.2, §3.5.3, §3.6.3). Checked when a request is decoded, before any token is touched.
public enum UAFBounds {
  /// ServerChallenge: base64url(byte[8...64]) (§3.1.6; at least 8 bytes, at most 64 so a SHA-512 fits).
  public static let challengeBytes = 8...64
  /// KeyID: base64url(byte[32...2048]) (§3.1.5).
  public static let keyIDBytes = 32...2048
  /// OperationHeader.appID: string[0..512] (§3.1.3).
  public static let appIDLength = 0...512
  /// OperationHeader.serverData: string[1..1536] when present (§3.1.3).
  public static let serverDataLength = 1...1536
  /// RegistrationRequest.username: string[1..128] (§3.4.2).
  public static let usernameLength = 1...128
  /// AuthenticatorInfo.assertionScheme: string[8] (UAF Registry §3.1: 8-character names such as "UAFV1TLV").
  public static let assertionSchemeLength = 1...8
  /// Extension.id: string[1..32] (§3.1.10).
  public static let extensionIDLength = 1...32
  /// Extension.data: base64url, "MAY be empty" (§3.1.10); capped at the base64url length of 8192 bytes, the
  /// bound of the UAF 1.0 drafts (no request needs more; the message is capped at 1 MiB anyway).
  public static let extensionDataLength = 0...10_923
  /// Version.major/minor: unsigned short (§3.1.1).
  public static let versionComponent = 0...0xFFFF
  /// Transaction.content: base64url(byte[1...]) (§3.5.1).
  public static let transactionContentMinBytes = 1
  /// Transaction.content of type text/plain: "a maximum of 200 characters" (§3.5.1).
  public static let transactionTextCharacters = 200
  /// Transaction.contentType: "only supports the values text/plain or image/png" (§3.5.1).
  public static let transactionContentTypes: Set<String> = ["text/plain", "image/png"]
}

/// Collects the first violated bound of a request (the check stops there).
struct RequestValidator {
  let index: Int

  func fail(_ field: String, _ rule: UAFFieldRule) -> UAFMessageError {
    .invalidField(request: index, field: field, rule: rule)
  }

  func length(_ s: String, _ bounds: ClosedRange<Int>, _ field: String) throws(UAFMessageError) {
    // string[n..m] counts characters (code points), not bytes (UAF Protocol v1.1 §3, notation).
    guard bounds.contains(s.unicodeScalars.count) else {
      throw fail(field, .length(min: bounds.lowerBound, max: bounds.upperBound))
    }
  }

  func base64URL(_ s: String, _ bytes: ClosedRange<Int>?, min: Int = 0, _ field: String) throws(UAFMessageError) {
    let rule = UAFFieldRule.base64URL(minBytes: bytes?.lowerBound ?? min, maxBytes: bytes?.upperBound)
    // Refuse by length before decoding: 4 characters carry 3 bytes.
    if let bytes, s.utf8.count > (bytes.upperBound + 2) / 3 * 4 + 2 { throw fail(field, rule) }
    guard let decoded = Base64URL.decodeUnpadded(s), decoded.count >= (bytes?.lowerBound ?? min),
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

  /// Extension (§3.1.10): `id` string[1..32]; `data` base64url, "MAY be empty".
  func extensions(_ exts: [Extension]?, _ field: String) throws(UAFMessageError) {
    for (i, e) in (exts ?? []).enumerated() {
      try length(e.id, UAFBounds.extensionIDLength, "\(field)[\(i)].id")
      try length(e.data, UAFBounds.extensionDataLength, "\(field)[\(i)].data")
      if !e.data.isEmpty { try base64URL(e.data, nil, "\(field)[\(i)].data") }
    }
  }

  func header(_ h: OperationHeader) throws(UAFMessageError) {
    try version(h.upv, "header.upv")
    if let appID = h.appID { try length(appID, UAFBounds.appIDLength, "header.appID") }
    if let serverData = h.serverData { try length(serverData, UAFBounds.serverDataLength, "header.serverData") }
    try extensions(h.exts, "header.exts")
  }

  /// "unknown extensions MUST result in an error" when `fail_if_unknown` is true (§3.1.10); checked after every
  /// field is known to be well-formed, so a malformed message is a protocol error first.
  func knownExtensions(_ h: OperationHeader) throws(UAFMessageError) {
    if let e = h.exts?.first(where: { $0.failIfUnknown && !UAFExtensions.known.contains($0.id) }) {
      throw .unknownExtension(request: index, id: e.id)
    }
  }

  /// MatchCriteria (§3.1.11): well-formed fields, and the combinations the spec allows: `aaid` only beside
  /// keyIDs, attachmentHint, authenticatorVersion and exts; without `aaid`, authenticationAlgorithms and
  /// assertionSchemes both present (and, as every list, not empty).
  func criteria(_ c: MatchCriteria, _ field: String) throws(UAFMessageError) {
    if c.aaid != nil {
      let forbidden: [(String, Bool)] = [
        ("vendorID", c.vendorID != nil), ("userVerification", c.userVerification != nil),
        ("keyProtection", c.keyProtection != nil), ("matcherProtection", c.matcherProtection != nil),
        ("tcDisplay", c.tcDisplay != nil), ("authenticationAlgorithms", c.authenticationAlgorithms != nil),
        ("assertionSchemes", c.assertionSchemes != nil), ("attestationTypes", c.attestationTypes != nil),
      ]
      if let (name, _) = forbidden.first(where: \.1) { throw fail(field, .aaidCombinedWith(name)) }
    } else if c.authenticationAlgorithms == nil || c.assertionSchemes == nil {
      throw fail(field, .algorithmsAndSchemesRequired)
    }
    let lists: [(String, Bool)] = [
      ("aaid", c.aaid?.isEmpty == true), ("vendorID", c.vendorID?.isEmpty == true),
      ("keyIDs", c.keyIDs?.isEmpty == true), ("authenticationAlgorithms", c.authenticationAlgorithms?.isEmpty == true),
      ("assertionSchemes", c.assertionSchemes?.isEmpty == true),
      ("attestationTypes", c.attestationTypes?.isEmpty == true),
    ]
    if let (name, _) = lists.first(where: \.1) { throw fail("\(field).\(name)", .notEmpty) }
    for (i, a) in (c.aaid ?? []).enumerated() { try aaid(a, "\(field).aaid[\(i)]") }
    for (i, v) in (c.vendorID ?? []).enumerated() {
      guard v.utf8.count == 4, v.utf8.allSatisfy(isASCIIHexDigit) else {
        throw fail("\(field).vendorID[\(i)]", .vendorID)
      }
    }
    for (i, k) in (c.keyIDs ?? []).enumerated() { try keyID(k, "\(field).keyIDs[\(i)]") }
    for (i, s) in (c.assertionSchemes ?? []).enumerated() {
      try length(s, UAFBounds.assertionSchemeLength, "\(field).assertionSchemes[\(i)]")
    }
    try extensions(c.exts, "\(field).exts")
  }

  /// Policy (§3.1.12): `accepted` "MUST NOT be empty", nor any of its sets; `disallowed` entries are criteria
  /// like any other (a malformed one is a protocol error, never a reason to match nothing).
  func policy(_ p: Policy) throws(UAFMessageError) {
    guard !p.accepted.isEmpty else { throw fail("policy.accepted", .notEmpty) }
    if let i = p.accepted.firstIndex(where: \.isEmpty) { throw fail("policy.accepted[\(i)]", .notEmpty) }
    if p.disallowed?.isEmpty == true { throw fail("policy.disallowed", .notEmpty) }
    for (i, group) in p.accepted.enumerated() {
      for (j, c) in group.enumerated() { try criteria(c, "policy.accepted[\(i)][\(j)]") }
    }
    for (i, c) in (p.disallowed ?? []).enumerated() { try criteria(c, "policy.disallowed[\(i)]") }
  }

  /// Transaction (§3.5.1): contentType text/plain or image/png; content base64url (no padding) of at least one
  /// byte; text/plain at most 200 characters; image/png with its tcDisplayPNGCharacteristics. The spec says
  /// the text is ASCII: UTF-8 text is taken too (shown escaped, hashed as sent), as servers in other languages
  /// send it (HardwareNotes.md, "UAF messages").
  func transaction(_ t: Transaction, _ field: String) throws(UAFMessageError) {
    guard UAFBounds.transactionContentTypes.contains(t.contentType) else {
      throw fail(field + ".contentType", .contentType)
    }
    try base64URL(t.content, nil, min: UAFBounds.transactionContentMinBytes, field + ".content")
    if t.contentType == "text/plain" {
      let max = UAFBounds.transactionTextCharacters
      guard let bytes = Base64URL.decodeUnpadded(t.content), let text = String(validating: bytes, as: UTF8.self),
        text.unicodeScalars.count <= max
      else { throw fail(field + ".content", .textLength(max: max)) }
    } else if t.tcDisplayPNGCharacteristics == nil {
      throw fail(field + ".tcDisplayPNGCharacteristics", .pngCharacteristicsRequired)
    }
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
      if auth.transaction?.isEmpty == true { throw fail("transaction", .notEmpty) }
      for (i, t) in (auth.transaction ?? []).enumerated() { try transaction(t, "transaction[\(i)]") }
      try policy(auth.policy)
    case .deregistration(let dereg):
      let uaf11 = dereg.header.upv != .uaf10
      guard !dereg.authenticators.isEmpty else { throw fail("authenticators", .notEmpty) }
      for (i, a) in dereg.authenticators.enumerated() {
        let field = "authenticators[\(i)]"
        if a.aaid.isEmpty || a.keyID.isEmpty {
          guard uaf11 else { throw fail(field, .wildcardNeedsUAF11) }
        }
        if a.aaid.isEmpty {
          guard a.keyID.isEmpty else { throw fail(field + ".keyID", .keyIDWithoutAAID) }
          guard dereg.authenticators.count == 1 else { throw fail(field, .wildcardNotAlone) }
        } else {
          try aaid(a.aaid, field + ".aaid")
        }
        if !a.keyID.isEmpty { try keyID(a.keyID, field + ".keyID") }
      }
    }
    try knownExtensions(r.header)
  }
}

/// The UAF extensions this client and its authenticators understand (UAF Registry of Predefined Values §5):
/// none yet, so every extension marked `fail_if_unknown` is refused.
public enum UAFExtensions {
  public static let known: Set<String> = []
}
