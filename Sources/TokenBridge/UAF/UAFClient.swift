import FoundationEssentials
import SystemCrypto
import TokenDevices
import UAFCore

/// Chooses the account for a username-less authentication (the SDKs' AccountSelector).
public protocol AccountSelector {
  func selectAccount(from accounts: [AuthenticatorRecord]) throws -> AuthenticatorRecord
  /// The same choice with every account listed, usable or not, with the reasons (`candidates`); `usable` are
  /// the records that may be chosen. Default: `selectAccount(from: usable)`.
  func selectAccount(among candidates: [SelectionCandidate], usable: [AuthenticatorRecord]) throws
    -> AuthenticatorRecord
}

extension AccountSelector {
  public func selectAccount(among candidates: [SelectionCandidate], usable: [AuthenticatorRecord]) throws
    -> AuthenticatorRecord
  {
    try selectAccount(from: usable)
  }
}

/// One row of a choice (an authenticator for a registration, an account for a username-less authentication):
/// whether this hardware supports it and whether the server's policy accepts it, and why not. What a front end
/// lists, on a terminal and in `--json`.
public struct SelectionCandidate: Sendable, Equatable, Codable {
  /// The token's id and name (`displayable` before showing the name).
  public var token: String
  public var name: String
  public var aaid: String
  /// Accounts: the registration's username and KeyID.
  public var username: String?
  public var keyID: String?
  public var isSupportedByHardware: Bool
  public var isPolicyCompliant: Bool
  /// Why this hardware cannot serve (e.g. "PIN blocked", "needs hmac-secret, which this key lacks").
  public var hardwareReasons: [String]
  /// Why the server's policy does not accept it (e.g. "AAID 7B1D#0002 is not among 7B1D#0001").
  public var policyReasons: [String]
  /// Every reason, hardware first.
  public var reasons: [String]

  public init(
    token: String, name: String, aaid: String, username: String? = nil, keyID: String? = nil,
    hardwareReasons: [String], policyReasons: [String]
  ) {
    self.token = token
    self.name = name
    self.aaid = aaid
    self.username = username
    self.keyID = keyID
    isSupportedByHardware = hardwareReasons.isEmpty
    isPolicyCompliant = policyReasons.isEmpty
    self.hardwareReasons = hardwareReasons
    self.policyReasons = policyReasons
    reasons = hardwareReasons + policyReasons
  }

  public var isUsable: Bool { isSupportedByHardware && isPolicyCompliant }

  /// The only thing that keeps this token out is its blocked PIN.
  static func onlyPINBlocked(_ t: TokenInfo) -> Bool {
    t.pin?.isBlocked == true && hardwareProblems(t).count == 1
  }

  /// What keeps a token from serving at all, whatever the policy says.
  static func hardwareProblems(_ t: TokenInfo) -> [String] {
    var out: [String] = []
    if t.pin?.isBlocked == true {
      out.append(t.fido2 == nil ? "PIN blocked (tokenbridge pin unblock)" : "PIN blocked (only a reset helps)")
    }
    if let f = t.fido2, !f.extensions.contains("hmac-secret") {
      out.append("needs hmac-secret, which this key lacks")
    }
    return out
  }
}

/// One authenticator offered for a registration (the SDKs' AuthenticatorSelectionContext item).
public struct AuthenticatorItem: Sendable {
  public var token: TokenInfo
  public var aaid: String
  /// The token can act as this authenticator here (PIN not blocked; a FIDO2 key with hmac-secret).
  public var isSupportedByHardware: Bool
  /// The server's policy accepts it.
  public var isPolicyCompliant: Bool
  /// Why it cannot be used (empty when it can): hardware reasons first, then the policy's.
  public var reasons: [String]
  /// The same, as a front end lists it.
  public var candidate: SelectionCandidate
}

/// Chooses the authenticator for a registration when several fit (the SDKs' AuthenticatorSelector).
public protocol AuthenticatorSelector {
  func selectAuthenticator(from items: [AuthenticatorItem]) throws -> AuthenticatorItem
}

/// What the client answered, and what to do once the server has accepted it.
public struct UAFClientResult: Sendable {
  public var op: UAFOperation
  /// The UAF response message (JSON array); nil for deregistration, which has no response leg.
  public var responseMessage: String?
  /// The pending registration's KeyID (confirm after the server accepts, abandon otherwise).
  public var pendingKeyID: String?
  public var username: String?
  /// Deregistered KeyIDs.
  public var removed: [String] = []
}

/// The FIDO UAF client: processUAFOperation over the PIV tokens present (UAF Client API §3; Protocol §3.4-3.6).
public struct UAFClient {
  public var configuration: Configuration
  public var facetID: String
  /// Where registrations are filed locally (the server origin; the appID for `uaf process`).
  public var server: String
  public var localData: LocalData
  public var tokens: [DiscoveredToken]
  public var fido2Keys: [DiscoveredFIDO2] = []
  /// Readers and devices seen but not usable, and why (`UAFTokens.notUsable`): part of "no token fits".
  public var notUsable: [String: [String]] = [:]
  public var fetchFacets: (URL) throws -> TrustedFacetsList
  public var channelBinding = ChannelBinding()
  /// Asked when several tokens fit a registration; nil: refuse and list them.
  public var authenticatorSelector: AuthenticatorSelector?
  /// Tokens known from an earlier listing and not asked now (another operation holds them): checkPolicy counts
  /// them as present.
  public var knownTokens: [TokenInfo] = []

  public init(
    configuration: Configuration, facetID: String, server: String, localData: LocalData,
    tokens: [DiscoveredToken], fetchFacets: @escaping (URL) throws -> TrustedFacetsList
  ) {
    self.configuration = configuration
    self.facetID = facetID
    self.server = server
    self.localData = localData
    self.tokens = tokens
    self.fetchFacets = fetchFacets
  }

  func authenticators() -> [any TokenAuthenticator] {
    tokens.map { PIVAuthenticator(token: $0, configuration: configuration, localData: localData) }
      + fido2Keys.map { FIDO2Authenticator(key: $0, configuration: configuration, localData: localData) }
      + knownTokens.flatMap(\.sides).map { KnownAuthenticator($0, configuration: configuration) }
  }

  /// What the caller asked the server for: every message the server sends back is checked against it
  /// before anything is processed (a server answering a registration with a Dereg gets nothing deleted).
  public struct Expectation: Sendable, Equatable {
    public var op: UAFOperation
    /// The user asked for (registration, deregistration); a request naming another is refused.
    public var username: String?
    /// Deregistration: only this KeyID may be touched.
    public var keyID: String?
    public init(op: UAFOperation, username: String? = nil, keyID: String? = nil) {
      self.op = op
      self.username = username
      self.keyID = keyID
    }
  }

  /// Processes a UAF request message; prompts through the given interactions. `expecting` nil: any operation
  /// (`uaf process`, where the caller hands over a request it got itself).
  public func process(
    _ message: String, expecting: Expectation?, verifier: PinUserVerifier, accountSelector: AccountSelector?
  ) throws(OperationError) -> UAFClientResult {
    let (request, appID) = try decodeAndCheckFacet(message, expecting: expecting)
    switch request {
    case .registration(let r):
      if let asked = expecting?.username, asked != r.username {
        throw .usernameMismatch(asked: asked, got: r.username)
      }
      return try register(r, appID: appID, verifier: verifier)
    case .authentication(let r):
      return try authenticate(r, appID: appID, verifier: verifier, accountSelector: accountSelector)
    case .deregistration(let r):
      return try deregister(r, appID: appID, expecting: expecting, verifier: verifier)
    }
  }

  /// The op, the single-message rules and every bounded field are checked before anything is processed; then
  /// the facet ID against the appID's trusted facets. Returns the request and the appID to sign for.
  func decodeAndCheckFacet(_ message: String, expecting: Expectation?) throws(OperationError) -> (UAFRequest, String) {
    let request: UAFRequest
    do { request = try UAFMessageCodec.decodeRequest(message, expecting: expecting?.op) } catch {
      throw .message(error)
    }
    let appID: String
    do {
      appID = try FacetCheck.check(
        appID: request.header.appID, facetID: facetID, upv: request.header.upv, allowLoopbackHTTP: true,
        fetch: fetchFacets)
    } catch { throw .facet(error) }
    return (request, appID)
  }

  /// checkPolicy (UAF Client API §3.1.3): would `process` find an authenticator for `message`? Never prompts and
  /// never touches a key: the same decoding, facet check and candidate choice as `process`, stopping before the
  /// first question. Throws what `process` would throw up to there (`.noSuitableAuthenticator` when nothing fits).
  public func checkPolicy(_ message: String) throws(OperationError) {
    let (request, appID) = try decodeAndCheckFacet(message, expecting: nil)
    switch request {
    case .registration(let r):
      _ = try registrationCandidates(r)
    case .authentication(let r):
      _ = try transactionText(r)
      _ = try authenticationCandidates(r, appID: appID)
    case .deregistration:
      return
    }
  }

  func finalChallenge(_ appID: String, _ challenge: String) throws(OperationError) -> (String, [UInt8]) {
    try OperationError.needCrypto()
    let fc = FinalChallengeParams(appID: appID, challenge: challenge, facetID: facetID, channelBinding: channelBinding)
      .encoded()
    return (fc, Array(SHA256.hash(data: Array(fc.utf8))))
  }

  func register(_ r: RegistrationRequest, appID: String, verifier: PinUserVerifier) throws(OperationError)
    -> UAFClientResult
  {
    let (all, items, compliant) = try registrationCandidates(r)
    var pick = compliant[0]
    if compliant.count > 1 {
      guard let authenticatorSelector else { throw .choiceNeeded(accounts: false, items.map(\.candidate)) }
      do { pick = try authenticatorSelector.selectAuthenticator(from: items) } catch { throw mapInteraction(error) }
      guard pick.isPolicyCompliant && pick.isSupportedByHardware else { throw .cancelled }
    }
    guard let chosen = all.first(where: { $0.tokenInfo.id == pick.token.id }) else { throw .cancelled }
    let (fc, fch) = try finalChallenge(appID, r.challenge)
    let (assertion, keyID) = try chosen.register(
      username: r.username, server: server, appID: appID, finalChallengeHash: fch, verifier: verifier)
    let response = UAFResponse(
      header: r.header, fcParams: fc, assertions: [AuthenticatorAssertion(assertion: Base64URL.encode(assertion))])
    return UAFClientResult(
      op: .reg, responseMessage: UAFMessageCodec.encodeResponses([response]), pendingKeyID: keyID,
      username: r.username)
  }

  /// Every authenticator present, each as a registration candidate, and those that can take it (at least one).
  func registrationCandidates(_ r: RegistrationRequest) throws(OperationError)
    -> (all: [any TokenAuthenticator], items: [AuthenticatorItem], compliant: [AuthenticatorItem])
  {
    let all = authenticators()
    let items = all.map { a in
      let c = SelectionCandidate(
        token: a.tokenInfo.id, name: a.tokenInfo.name, aaid: a.aaid,
        hardwareReasons: SelectionCandidate.hardwareProblems(a.tokenInfo),
        policyReasons: PolicyMatcher.refusal(r.policy, a.describe(keyIDs: [])) ?? [])
      return AuthenticatorItem(
        token: a.tokenInfo, aaid: a.aaid, isSupportedByHardware: c.isSupportedByHardware,
        isPolicyCompliant: c.isPolicyCompliant, reasons: c.reasons, candidate: c)
    }
    var compliant = items.filter { $0.isPolicyCompliant && $0.isSupportedByHardware }
    if compliant.isEmpty,
      let blocked = items.first(where: { $0.isPolicyCompliant && SelectionCandidate.onlyPINBlocked($0.token) })
    {
      // Nothing else could serve: the token's own PIN flow says how to get out of the block (exit 7).
      compliant = [blocked]
    }
    guard !compliant.isEmpty else {
      var why: [String: [String]] = [:]
      for i in items { why["\(i.token.id) (\(i.aaid))"] = i.reasons }
      throw .noSuitableAuthenticator(reasons(why, all))
    }
    return (all, items, compliant)
  }

  func authenticate(
    _ r: AuthenticationRequest, appID: String, verifier: PinUserVerifier, accountSelector: AccountSelector?
  ) throws(OperationError) -> UAFClientResult {
    let transaction = try transactionText(r)
    let (candidates, listed) = try authenticationCandidates(r, appID: appID)
    var chosen = candidates[0]
    if candidates.count > 1 {
      guard let accountSelector else { throw .choiceNeeded(accounts: true, listed) }
      let pick: AuthenticatorRecord
      do { pick = try accountSelector.selectAccount(among: listed, usable: candidates.map(\.1)) } catch {
        throw mapInteraction(error)
      }
      guard let c = candidates.first(where: { $0.1.keyID == pick.keyID }) else { throw .cancelled }
      chosen = c
    }
    let (fc, fch) = try finalChallenge(appID, r.challenge)
    let assertion = try chosen.0.authenticate(
      record: chosen.1, finalChallengeHash: fch, transaction: transaction, verifier: verifier)
    let response = UAFResponse(
      header: r.header, fcParams: fc, assertions: [AuthenticatorAssertion(assertion: Base64URL.encode(assertion))])
    return UAFClientResult(
      op: .auth, responseMessage: UAFMessageCodec.encodeResponses([response]), username: chosen.1.username)
  }

  /// The transaction text to confirm: only text/plain can be shown here; it is picked, and a request offering
  /// images only is refused.
  func transactionText(_ r: AuthenticationRequest) throws(OperationError) -> (text: String, bytes: [UInt8])? {
    guard let t = r.transaction, !t.isEmpty else { return nil }
    guard let plain = t.first(where: { $0.contentType == "text/plain" }) else {
      throw .transaction(.unsupportedType(t[0].contentType))
    }
    do { return try TransactionContent.text(plain) } catch { throw .transaction(error) }
  }

  /// The (token, registration) pairs that can sign in (at least one), and every account listed for a choice.
  func authenticationCandidates(_ r: AuthenticationRequest, appID: String) throws(OperationError)
    -> (candidates: [(any TokenAuthenticator, AuthenticatorRecord)], listed: [SelectionCandidate])
  {
    let records: [AuthenticatorRecord]
    do { records = try localData.authenticators(server: server).filter { $0.appID == appID } } catch {
      throw .localData(error)
    }
    // Each (token, registration) pair is a candidate; the policy decides which.
    var candidates: [(any TokenAuthenticator, AuthenticatorRecord)] = []
    // Every account (registration) here, usable or not, with its reasons: what a choice lists.
    var listed: [SelectionCandidate] = []
    // Accounts kept out only by a blocked PIN: when nothing else can serve, the token's own PIN flow says how
    // to get out of the block (exit 7) rather than "no suitable authenticator".
    var blocked: [(any TokenAuthenticator, AuthenticatorRecord)] = []
    var why: [String: [String]] = [:]
    for a in authenticators() {
      let mine = records.filter { $0.tokenID == a.tokenInfo.id && $0.aaid == a.aaid }
      if mine.isEmpty {
        why[a.tokenInfo.id, default: []].append("no registration for this server on it")
        continue
      }
      let hardware = SelectionCandidate.hardwareProblems(a.tokenInfo)
      for rec in mine {
        let c = SelectionCandidate(
          token: a.tokenInfo.id, name: a.tokenInfo.name, aaid: a.aaid, username: rec.username, keyID: rec.keyID,
          hardwareReasons: hardware,
          policyReasons: PolicyMatcher.refusal(r.policy, a.describe(keyIDs: [rec.keyID])) ?? [])
        listed.append(c)
        if c.isUsable {
          candidates.append((a, rec))
        } else {
          why[a.tokenInfo.id, default: []] += c.reasons
          if c.isPolicyCompliant && SelectionCandidate.onlyPINBlocked(a.tokenInfo) { blocked.append((a, rec)) }
        }
      }
    }
    let present = Set(tokens.map(\.info.id) + fido2Keys.map(\.info.id) + knownTokens.flatMap(\.sides).map(\.id))
    let absent = records.filter { !present.contains($0.tokenID) }
    for rec in absent {
      why["\(rec.username) on \(rec.tokenID)", default: []].append("that token is not plugged in")
      listed.append(
        SelectionCandidate(
          token: rec.tokenID, name: "", aaid: rec.aaid, username: rec.username, keyID: rec.keyID,
          hardwareReasons: ["that token is not plugged in"], policyReasons: []))
    }
    if candidates.isEmpty && blocked.count == 1 { candidates = blocked }
    guard !candidates.isEmpty else { throw .noSuitableAuthenticator(why.merging(notUsable) { $0 + $1 }) }
    return (candidates, listed)
  }

  /// Only keys of the request's appID (and the entries' AAID and KeyID; UAF 1.1 §3.6.1: an empty AAID means
  /// every authenticator, an empty KeyID every key of that AAID) are touched; when the user asked the server
  /// for a deregistration, only that user's keys (and only the asked KeyID). A Dereg for another appID or user
  /// is a no-op (the client's answer is still NO_ERROR, UAF Client API §3.1.2).
  func deregister(
    _ r: DeregistrationRequest, appID: String, expecting: Expectation?, verifier: PinUserVerifier
  ) throws(OperationError) -> UAFClientResult {
    let records: [AuthenticatorRecord]
    do {
      records = try localData.authenticators(server: server).filter { rec in
        rec.appID == appID && (expecting?.username.map { $0 == rec.username } ?? true)
          && (expecting?.keyID.map { $0 == rec.keyID } ?? true)
      }
    } catch { throw .localData(error) }
    var removed: [String] = []
    for entry in r.authenticators {
      let hits = records.filter { entry.covers(aaid: $0.aaid, keyID: $0.keyID) }
      for rec in hits where !removed.contains(rec.keyID) {
        if let a = authenticators().first(where: { $0.tokenInfo.id == rec.tokenID }) {
          try a.destroyKey(rec, verifier: verifier)
        } else {
          // Token absent: forget it locally; the slot stays recorded as ours and is reused later.
          do { try localData.abandon(rec.keyID) } catch { throw .localData(error) }
        }
        removed.append(rec.keyID)
      }
    }
    return UAFClientResult(op: .dereg, responseMessage: nil, removed: removed)
  }

  /// Why nothing fits: per authenticator, plus what was seen and not usable; "(none)" when nothing was seen.
  func reasons(_ r: [String: [String]], _ all: [any TokenAuthenticator]) -> [String: [String]] {
    let why = r.merging(notUsable) { $0 + $1 }
    return all.isEmpty && why.isEmpty ? ["(none)": ["no token (PIV card or FIDO2 key) is plugged in"]] : why
  }
}
