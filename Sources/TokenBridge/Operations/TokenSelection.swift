import TokenDevices

/// Finds the token a command works on: the one named by `--token`, the only one, or the user's choice.
public struct TokenSelection {
  public var discovery: TokenDiscovery

  public init(trace: TraceSink? = nil, includePUK: Bool = true) {
    discovery = TokenDiscovery(trace: trace, includePUK: includePUK)
  }

  public func choose(id: String?, selector: TokenSelector?) throws(OperationError) -> DiscoveredToken {
    let result: DiscoveryResult
    do { result = try discovery.discover() } catch { throw .token(error) }
    if let id {
      guard let hit = result.found.first(where: { $0.info.id == id }) else {
        throw .tokenNotFound(id, available: result.tokens)
      }
      return hit
    }
    switch result.found.count {
    case 0:
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

  func describe(_ e: TokenError) -> String {
    switch e {
    case .notPIV: "not a PIV card"
    case .smartCard(let s): "\(s)"
    default: "\(e)"
    }
  }
}

func mapInteraction(_ error: Error) -> OperationError {
  switch error {
  case InteractionError.cancelled: .cancelled
  case InteractionError.timedOut: .timedOut
  case let e as OperationError: e
  case let e as TokenError: .token(e)
  default: .interaction(error)
  }
}
