import FoundationEssentials
import TokenDevices
import UAFCore

/// The tokens a UAF command may use (PIV cards and FIDO2 keys present; only the named one with an id).
public struct UAFTokens {
  var piv: [DiscoveredToken]
  var fido2: [DiscoveredFIDO2]
  /// What was seen and could not be used, per reader or device (a card that did not answer, an empty reader,
  /// PC/SC or libfido2 itself): named when no token fits, so "no token fits" never hides a token it skipped.
  var notUsable: [String: [String]] = [:]
  public var infos: [TokenInfo] { piv.map(\.info) + fido2.map(\.info) }
  /// What cancels an operation waiting for a touch on one of these keys (Ctrl-C: CTAPHID_CANCEL; the command
  /// then ends as cancelled).
  public var cancellers: [Canceller] { fido2.map(\.session.canceller) }
}

/// What every command about servers and local data sets up, for any front end: the configuration (validated),
/// the local data (opened safely; registrations whose run died are repaired, live ones are left alone), the
/// tokens, and the operations. Touch cues and Ctrl-C cancellation are wired here, not in the front end.
public struct UAFEnvironment {
  public let configuration: Configuration
  public let localData: LocalData
  /// Registrations left pending by a run that is gone (crash, kill -9), repaired when this was opened.
  public let repaired: [AuthenticatorRecord]
  /// Told when an account's dispatch target could not be made or removed (see `ServerOperations`).
  public var dispatchTargetFailed: ((DeviceServiceError) -> Void)?

  public init(configuration: Configuration? = nil, dataDirectory: URL = Configuration.dataDirectory)
    throws(OperationError)
  {
    if let configuration {
      self.configuration = configuration
    } else {
      do { self.configuration = try Configuration.load() } catch { throw .configuration(error) }
    }
    do { localData = try LocalData(directory: dataDirectory) } catch { throw .localData(error) }
    do { repaired = try localData.repairInterrupted() } catch { throw .localData(error) }
  }

  /// Tokens present (only `id`'s when given). `touchCue` is told when a FIDO2 key waits for a touch.
  /// `details: false` when no prompt will show a PIV card's version or its PIN's maximum (`--pin-fd`).
  /// `fido2Info: false` for a command that only signs in with registered keys (`TokenDiscovery.fido2Info`).
  /// `cardReaders`: only cards in these readers are asked (`TokenDiscovery.cardReaders`).
  public func tokens(
    id: String?, trace: TraceSink?, details: Bool = true, fido2Info: Bool = true, wait: TokenWait? = nil,
    cardReaders: Set<String>? = nil, touchCue: @escaping (TokenInfo) -> Void
  ) throws(OperationError) -> UAFTokens {
    try wait.run(id: id) { () throws(OperationError) in
      let found = try tokensNow(
        id: id, trace: trace, details: details, fido2Info: fido2Info, cardReaders: cardReaders, touchCue: touchCue)
      // Waiting: a command that needs a token needs at least one.
      if wait != nil && id == nil && found.infos.isEmpty { throw .noToken(readers: 0, emptyReaders: [], unusable: []) }
      return found
    }
  }

  func tokensNow(
    id: String?, trace: TraceSink?, details: Bool, fido2Info: Bool = true, cardReaders: Set<String>? = nil,
    touchCue: @escaping (TokenInfo) -> Void
  ) throws(OperationError) -> UAFTokens {
    let result: DiscoveryResult
    var discovery = TokenDiscovery(trace: trace, includePUK: false)
    discovery.cardReaders = cardReaders
    discovery.details = details
    discovery.fido2Info = fido2Info
    discovery.onlyID = id  // the other tokens are not asked for their tries (nor FIDO2 keys opened)
    discovery.holdCards = true  // one SELECT and one read of the tries per command (HardwareNotes.md)
    do { result = try discovery.discover() } catch { throw .token(error) }
    for k in result.fido2Found {
      let info = k.info
      k.session.touchCue = { touchCue(info) }
    }
    guard let id else {
      var notUsable: [String: [String]] = [:]
      for p in seenNotUsable(result) { notUsable[p.place, default: []].append(p.reason) }
      for r in result.emptyReaders { notUsable[displayable(r), default: []].append("no card in this reader") }
      return UAFTokens(piv: result.found, fido2: result.fido2Found, notUsable: notUsable)
    }
    let piv = result.found.filter { $0.info.id == id }
    let fido2 = result.fido2Found.filter { $0.info.id == id }
    if piv.isEmpty && fido2.isEmpty {
      // The named token is there but unusable (e.g. a FIDO2 key that does not answer): say why.
      if let u = result.unusableCards.first(where: { $0.id == id }) { throw .token(u.reason) }
      throw .tokenNotFound(id, available: result.tokens)
    }
    return UAFTokens(piv: piv, fido2: fido2)
  }

  /// The server: the option, else the configuration's.
  public func server(_ option: String?) throws(OperationError) -> String {
    guard let s = option ?? configuration.server else { throw .configuration(.noServer) }
    return s
  }

  public func operations(
    server: String?, facetID: String?, tokens: UAFTokens, authenticatorSelector: AuthenticatorSelector?
  ) throws(OperationError) -> ServerOperations {
    var ops = try ServerOperations(
      configuration: configuration, server: try self.server(server), facetID: facetID, localData: localData,
      tokens: tokens.piv, fido2Keys: tokens.fido2)
    ops.client.authenticatorSelector = authenticatorSelector
    ops.client.notUsable = tokens.notUsable
    ops.dispatchTargetFailed = dispatchTargetFailed
    return ops
  }

  /// An out-of-band payload (QR text, link, push JSON) as `tokenbridge oob` and the desktop service read it:
  /// decrypted with this device's key when it is encrypted for it.
  public func outOfBandPayload(_ source: OutOfBandSource) throws(OperationError) -> OutOfBandPayload {
    try OperationError.needCrypto()
    do throws(OutOfBandError) { return try OutOfBandPayload(source, decrypter: localData.payloadDecrypter) } catch {
      throw .outOfBand(error)
    }
  }

  /// Redeems `payload` and runs the operation it names on `tokens` (`tokenbridge oob`, the service's
  /// ProcessOutOfBand): one path for both. `facetID`: the caller's verified facet (the service); nil: the redeem
  /// URL's origin (the CLI, whose user typed or scanned the payload).
  public func redeem(
    _ payload: OutOfBandPayload, facetID: String? = nil, tokens: UAFTokens,
    authenticatorSelector: AuthenticatorSelector?, verifier: PinUserVerifier, accountSelector: AccountSelector?
  ) throws(OperationError) -> UAFClientResult {
    try operations(
      server: payload.serverOrigin, facetID: facetID, tokens: tokens, authenticatorSelector: authenticatorSelector
    ).redeem(payload, verifier: verifier, accountSelector: accountSelector)
  }

  /// The device-information operations (change, check, sync, pending) over this local data.
  public var device: DeviceInformationOperations {
    DeviceInformationOperations(localData: localData, configuration: configuration)
  }

  /// The x-callback target to open after the operation (`success`, `error` or `cancel`): when allowed, `url` is
  /// the serialization the allow-list decision was made on (`CallbackURL`), the string to open; else the target
  /// as given, to name it.
  public func callbackTarget(_ target: String?) -> (url: String, allowed: Bool)? {
    guard let target else { return nil }
    if let opened = CallbackPolicy(allowed: configuration.callbackAllowList).opened(target) { return (opened, true) }
    return (target, false)
  }

  /// The local registrations the server said it no longer knows (1481) for `username` at `ops`' server.
  public func unknownRegistrations(_ ops: ServerOperations, username: String?) -> [AuthenticatorRecord] {
    (try? localData.authenticators(server: ops.backend.origin, username: username)) ?? []
  }

  /// processUAFOperation for other programs (`uaf process`, `tokenbridge serve`): `input` is
  /// `{"uafProtocolMessage": "…"}` or the bare request array. Returns the response envelope (`{"uafProtocolMessage":
  /// "…"}`, empty for Dereg). A registration is confirmed locally once answered: the caller delivers it (FIDO client
  /// API semantics). `authenticatorSelector` is asked when several tokens could take a registration (nil: refuse,
  /// naming them).
  public func processUAF(
    input: [UInt8], facetID: String?, channelBinding: String?, tokens: UAFTokens, verifier: PinUserVerifier,
    accountSelector: AccountSelector?, authenticatorSelector: AuthenticatorSelector? = nil
  ) throws(OperationError) -> String {
    try processUAFOperation(
      input: input, facetID: facetID, channelBinding: channelBinding, tokens: tokens, verifier: verifier,
      accountSelector: accountSelector, authenticatorSelector: authenticatorSelector
    ).envelope
  }

  /// `processUAF`, also giving the KeyID of a registration it answered, which a later notifyUAFResult the server
  /// refused abandons (`abandonRegistration`). `confirm` false: the registration stays pending, owned by this
  /// process, until the caller confirms it (`confirmRegistration`, once the answer reached whoever asked) or
  /// abandons it (the request was cancelled meanwhile); if this process dies first, the next opening of the local
  /// data abandons it.
  public func processUAFOperation(
    input: [UInt8], facetID: String?, channelBinding: String?, tokens: UAFTokens, verifier: PinUserVerifier,
    accountSelector: AccountSelector?, authenticatorSelector: AuthenticatorSelector? = nil, confirm: Bool = true
  ) throws(OperationError) -> (envelope: String, registeredKeyID: String?) {
    let (client, message) = try uafClient(
      input: input, facetID: facetID, channelBinding: channelBinding, tokens: tokens,
      authenticatorSelector: authenticatorSelector)
    let result = try client.process(message, expecting: nil, verifier: verifier, accountSelector: accountSelector)
    if confirm, let k = result.pendingKeyID { try confirmRegistration(k) }
    return (UAFEnvelope.write(result.responseMessage ?? ""), result.pendingKeyID)
  }

  /// A registration answered by `processUAFOperation(confirm: false)` whose answer was delivered: registered.
  public func confirmRegistration(_ keyID: String) throws(OperationError) {
    do { try localData.confirmRegistration(keyID) } catch { throw .localData(error) }
  }

  /// checkPolicy for other programs (`tokenbridge serve`): what `processUAF` would throw before its first question
  /// (nothing when a token fits). Never prompts, never touches a key.
  public func checkPolicy(input: [UInt8], facetID: String?, tokens: UAFTokens) throws(OperationError) {
    let (client, message) = try uafClient(
      input: input, facetID: facetID, channelBinding: nil, tokens: tokens, authenticatorSelector: nil)
    try client.checkPolicy(message)
  }

  /// checkPolicy over tokens known from an earlier listing, without asking any token (the desktop service while
  /// another operation holds them).
  public func checkPolicy(input: [UInt8], facetID: String?, known: [TokenInfo]) throws(OperationError) {
    var (client, message) = try uafClient(
      input: input, facetID: facetID, channelBinding: nil, tokens: UAFTokens(piv: [], fido2: []),
      authenticatorSelector: nil)
    client.knownTokens = known
    try client.checkPolicy(message)
  }

  /// A registration answered by `processUAFOperation` that the server then refused: forgotten locally (its slot
  /// stays recorded as ours and is reused).
  public func abandonRegistration(_ keyID: String) throws(OperationError) {
    do { try localData.abandon(keyID) } catch { throw .localData(error) }
  }

  /// The client for one request of another program, and the request message out of its envelope.
  func uafClient(
    input: [UInt8], facetID: String?, channelBinding: String?, tokens: UAFTokens,
    authenticatorSelector: AuthenticatorSelector?
  ) throws(OperationError) -> (UAFClient, String) {
    guard let facet = facetID ?? configuration.facetID else { throw .configuration(.noFacetID) }
    let message: String
    do { message = try UAFEnvelope.read(input) } catch { throw .message(error) }
    let networkTimeout = configuration.networkTimeout
    var client = UAFClient(
      configuration: configuration, facetID: facet, server: facet, localData: localData, tokens: tokens.piv,
      fetchFacets: { url in try BackendClient(server: url.absoluteString, timeout: networkTimeout).trustedFacets(url) })
    client.fido2Keys = tokens.fido2
    client.authenticatorSelector = authenticatorSelector
    if let cb = channelBinding {
      guard let v = try? JSONDecoder().decode(ChannelBinding.self, from: Data(cb.utf8)) else {
        throw .input(.badChannelBinding)
      }
      client.channelBinding = v
    }
    return (client, message)
  }
}

/// Lists every token, for `tokens`: what discovery found, with the reasons others cannot be used.
public struct TokenListing: Sendable {
  public var tokens: [TokenInfo]
  public var emptyReaders: [String]
  public var readerCount: Int
  /// One line per reader/device that holds something unusable, a PC/SC problem when FIDO2 keys were found, and a
  /// libfido2 problem when smart cards were found.
  public var problems: [String]

  /// With `id` (`--token`): only that token (one physical token, named by either of its ids), or `.tokenNotFound`
  /// naming the ones present. With `wait` (`--wait`): while no token is there (or not `id`), waits for one to
  /// arrive, as the other token commands do.
  public init(trace: TraceSink?, wait: TokenWait? = nil, id: String? = nil) throws(OperationError) {
    let (r, tokens) = try wait.run(id: id) { () throws(OperationError) -> (DiscoveryResult, [TokenInfo]) in
      let r: DiscoveryResult
      // A listing keeps no session (`TokenDiscovery.sessions`): cards are let go and keys closed by the threads
      // that read them.
      var discovery = TokenDiscovery(trace: trace)
      discovery.sessions = false
      do throws(TokenError) { r = try discovery.discover() } catch { throw .token(error) }
      let tokens = USBIdentity.merge(USBIdentity.group(r.tokens))
      if wait != nil {
        if let id, !tokens.contains(where: { $0.isNamed(id) }) {
          throw .tokenNotFound(id, available: tokens)
        }
        if tokens.isEmpty { throw .noToken(readers: r.readerCount, emptyReaders: r.emptyReaders, unusable: []) }
      }
      return (r, tokens)
    }
    readerCount = r.readerCount
    guard let id else {
      self.tokens = tokens
      emptyReaders = r.emptyReaders
      problems = seenNotUsable(r).map { "\($0.place): \($0.reason)" }
      return
    }
    // The named token only; what else was seen (empty readers, other tokens' problems) is not asked about.
    let named = tokens.filter { $0.isNamed(id) }
    if named.isEmpty {
      // A token seen but not usable is named with its reason, as a command about it would say.
      if let u = r.unusableCards.first(where: { $0.id == id }) { throw .token(u.reason) }
      throw .tokenNotFound(id, available: tokens)
    }
    self.tokens = named
    emptyReaders = []
    problems = []
  }
}

extension TokenInfo {
  /// `id` names this listing entry: its own id, or either id of one physical token (`USBIdentity.merge`).
  func isNamed(_ id: String) -> Bool { self.id == id || ids?.contains(id) == true }
}

/// What a discovery saw and could not use, each with where and why: unusable cards and keys (by reader or device),
/// and PC/SC itself when it failed beside tokens that were found.
func seenNotUsable(_ r: DiscoveryResult) -> [(place: String, reason: String)] {
  var out = r.unusableCards.map { (place: displayable($0.reader), reason: ErrorReport.unusable($0.reason)) }
  if let p = r.pcscProblem { out.append(("smart cards", ErrorReport.smartCard(p).message)) }
  return out
}

/// Limits of `uaf process` input.
public enum UAFProcessLimits {
  /// The largest request (envelope included) read from stdin.
  public static let maxInput = UAFMessageCodec.maxSize
}
