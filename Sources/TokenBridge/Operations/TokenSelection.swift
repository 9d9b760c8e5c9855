import TokenDevices

/// Finds the token a command works on: the one named by `--token`, the only one, or the user's choice.
public struct TokenSelection {
  public var discovery: TokenDiscovery
  /// `--wait`: no token (or not the named one) → wait for one to arrive instead of failing (WatchWait.swift).
  public var wait: TokenWait?

  /// `details: false` when nothing will show the token's firmware version or the PIN's maximum and default
  /// flag (a script's run: `--pin-fd`): a lone PIV card then costs SELECT, GET SERIAL and an empty VERIFY
  /// before the command's own APDUs (`TokenDiscovery.details`). `identify: false` as well, for a command that
  /// never shows or keeps the token's id: a lone card is then not asked its serial (`TokenDiscovery.identify`).
  public init(
    trace: TraceSink? = nil, includePUK: Bool = true, includeFIDO2: Bool = true, details: Bool = true,
    identify: Bool = true
  ) {
    discovery = TokenDiscovery(trace: trace, includePUK: includePUK, includeFIDO2: includeFIDO2)
    discovery.details = details
    discovery.identify = identify
  }

  /// Any kind of token (PIN commands work on PIV cards and FIDO2 keys alike).
  public func chooseAny(id: String?, selector: TokenSelector?) throws(OperationError) -> AnyToken {
    try wait.run(id: id) { () throws(OperationError) in try chooseAnyNow(id: id, selector: selector) }
  }

  func chooseAnyNow(id: String?, selector: TokenSelector?) throws(OperationError) -> AnyToken {
    let result: DiscoveryResult
    var discovery = discovery
    discovery.onlyID = id
    discovery.holdCards = true  // the chosen card is SELECTed once; the others are let go with `result`
    do { result = try discovery.discover() } catch { throw .token(error) }
    let all = result.found.map(AnyToken.piv) + result.fido2Found.map(AnyToken.fido2)
    if let id {
      guard let hit = all.first(where: { $0.info.id == id }) else {
        // The named token is there but unusable (e.g. a FIDO2 key that does not answer): say why.
        if let u = result.unusableCards.first(where: { $0.id == id }) { throw .token(u.reason) }
        throw .tokenNotFound(id, available: result.tokens)
      }
      return hit
    }
    switch all.count {
    case 0:
      if let missing = Self.missingLibrary(result.unusableCards) { throw .token(missing) }
      if result.pcscProblem == nil, let pulled = Self.pulled(result.unusableCards) { throw .token(pulled) }
      // PC/SC failed beside FIDO2 keys that failed: both are why nothing is usable.
      throw .noToken(
        readers: result.readerCount, emptyReaders: result.emptyReaders,
        unusable: result.unusableCards.map { "\($0.reader): \(describe($0.reason))" }
          + (result.pcscProblem.map { ["smart cards: \(ErrorReport.smartCard($0).message)"] } ?? []))
    case 1: return all[0]
    default:
      guard let selector else { throw .ambiguous(result.tokens) }
      let chosen: TokenInfo
      do { chosen = try selector.selectToken(from: result.tokens) } catch { throw mapInteraction(error) }
      guard let hit = all.first(where: { $0.info.id == chosen.id }) else { throw .cancelled }
      return hit
    }
  }

  /// Nothing is usable because a library is missing (libfido2, for every FIDO2 key): that is the thing to fix, and
  /// the error to show.
  static func missingLibrary(_ unusable: [UnusableToken]) -> TokenError? {
    guard let first = unusable.first, case .libraryMissing = first.reason,
      unusable.allSatisfy({ $0.reason == first.reason })
    else { return nil }
    return first.reason
  }

  /// Nothing is usable because every token there was pulled out while it was probed: that is what happened (exit
  /// 10, "removed during the operation"), not a token we cannot use (exit 11). Found by the lab's pull sweep.
  static func pulled(_ unusable: [UnusableToken]) -> TokenError? {
    guard let first = unusable.first,
      unusable.allSatisfy({
        if case .smartCard(.cardRemoved) = $0.reason { true } else { false }
      })
    else { return nil }
    return first.reason
  }

  public func choose(id: String?, selector: TokenSelector?) throws(OperationError) -> DiscoveredToken {
    try wait.run(id: id) { () throws(OperationError) in try chooseNow(id: id, selector: selector) }
  }

  func chooseNow(id: String?, selector: TokenSelector?, aliasing: Bool = true) throws(OperationError)
    -> DiscoveredToken
  {
    if let id, aliasing {
      // The FIDO2 key's id of a token that is also a PIV card (one USB device) names that card. The first
      // discovery's cards are let go before the second one looks (it would wait for their transactions).
      do throws(OperationError) {
        return try chooseNow(id: id, selector: selector, aliasing: false)
      } catch {
        guard case .tokenNotFound = error, let other = discovery.sibling(of: id) else { throw error }
        return try chooseNow(id: other, selector: selector, aliasing: false)
      }
    }
    let result: DiscoveryResult
    var discovery = discovery
    discovery.onlyID = id
    discovery.holdCards = true  // the chosen card is SELECTed once; the others are let go with `result`
    do { result = try discovery.discover() } catch { throw .token(error) }
    if let id {
      guard let hit = result.found.first(where: { $0.info.id == id }) else {
        throw .tokenNotFound(id, available: result.tokens)
      }
      return hit
    }
    switch result.found.count {
    case 0:
      // A smart-card command without PC/SC: that is the error, whatever FIDO2 keys were seen.
      if let p = result.pcscProblem { throw .token(.smartCard(p)) }
      throw .noToken(
        readers: result.readerCount, emptyReaders: result.emptyReaders,
        unusable: result.unusableCards.map { "\($0.reader): \(describe($0.reason))" })
    case 1: return result.found[0]
    default:
      guard let selector else { throw .ambiguous(result.tokens) }
      let chosen: TokenInfo
      do { chosen = try selector.selectToken(from: result.tokens) } catch { throw mapInteraction(error) }
      guard let hit = result.found.first(where: { $0.info.id == chosen.id }) else { throw .cancelled }
      return hit
    }
  }

  func describe(_ e: TokenError) -> String { ErrorReport.unusable(e) }
}

func mapInteraction(_ error: Error) -> OperationError {
  switch error {
  case InteractionError.cancelled: .cancelled
  case InteractionError.timedOut: .timedOut
  case let e as OperationError: e
  case let e as TokenError: .token(e)
  case let e as InputError: .input(e)
  default: .unexpected(String(describing: type(of: error)))
  }
}

/// A token of either kind.
public enum AnyToken {
  case piv(DiscoveredToken)
  case fido2(DiscoveredFIDO2)

  public var info: TokenInfo {
    switch self {
    case .piv(let t): t.info
    case .fido2(let t): t.info
    }
  }
}
