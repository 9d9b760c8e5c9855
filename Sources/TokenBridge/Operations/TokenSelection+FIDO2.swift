import TokenDevices

extension TokenSelection {
  /// The FIDO2 key a command works on: the one named by `--token`, the only one, or the user's choice.
  public func chooseFIDO2(id: String?, selector: TokenSelector?) throws(OperationError) -> DiscoveredFIDO2 {
    try wait.run(id: id) { () throws(OperationError) in try chooseFIDO2Now(id: id, selector: selector) }
  }

  func chooseFIDO2Now(id: String?, selector: TokenSelector?, aliasing: Bool = true) throws(OperationError)
    -> DiscoveredFIDO2
  {
    if let id, aliasing {
      // The PIV card's id of a token that is also a FIDO2 key (one USB device) names that key; the first
      // discovery's sessions are closed before the second one looks.
      do throws(OperationError) {
        return try chooseFIDO2Now(id: id, selector: selector, aliasing: false)
      } catch {
        switch error {
        case .tokenNotFound, .token(.unsupported): break
        default: throw error
        }
        guard let other = discovery.sibling(of: id) else { throw error }
        return try chooseFIDO2Now(id: other, selector: selector, aliasing: false)
      }
    }
    var discovery = discovery
    discovery.onlyID = id
    let result: DiscoveryResult
    do { result = try discovery.discover() } catch { throw .token(error) }
    let keys = result.fido2Found
    if let id {
      if let hit = keys.first(where: { $0.info.id == id }) { return hit }
      if let u = result.unusableCards.first(where: { $0.id == id }) { throw .token(u.reason) }
      if result.found.contains(where: { $0.info.id == id }) {
        throw .token(.unsupported("FIDO2 commands (\(id) is a PIV card)"))
      }
      throw .tokenNotFound(id, available: result.tokens)
    }
    switch keys.count {
    case 0:
      if let missing = Self.missingLibrary(result.unusableCards) { throw .token(missing) }
      if let pulled = Self.pulled(result.unusableCards.filter { $0.id?.hasPrefix("fido2-") == true }) {
        throw .token(pulled)
      }
      throw .noToken(
        readers: 0, emptyReaders: [],
        unusable: result.unusableCards.filter { $0.id?.hasPrefix("fido2-") == true }.map {
          "\($0.reader): \(ErrorReport.unusable($0.reason))"
        })
    case 1: return keys[0]
    default:
      guard let selector else { throw .ambiguous(keys.map(\.info)) }
      let chosen: TokenInfo
      do { chosen = try selector.selectToken(from: keys.map(\.info)) } catch { throw mapInteraction(error) }
      guard let hit = keys.first(where: { $0.info.id == chosen.id }) else { throw .cancelled }
      return hit
    }
  }
}
