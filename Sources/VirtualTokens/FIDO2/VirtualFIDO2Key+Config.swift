import Foundation

/// authenticatorConfig (CTAP 2.1 §6.11), setMinPINLength only (§6.11.4): what a desk sets on a key it hands out
/// (forceChangePin: the user must change the PIN before it is used again; a new minimum PIN length).
extension VirtualFIDO2Key.Processor {
  /// Offered where the profile lists the `authnrCfg` option.
  var configSupported: Bool { profile.option("authnrCfg") == true }

  func config(_ p: CBOR) -> Result<CBOR?, CTAP2Error> {
    guard let sub = p[int: 1]?.int else { return .failure(.init(.missingParameter)) }
    let params = p[int: 2]
    // A key with a PIN wants a pinUvAuthToken with the acfg permission over 32×0xff ‖ 0x0d ‖ subCommand ‖
    // subCommandParams (§6.11: "authenticatorConfig pinUvAuthParam"); one without a PIN takes the command as is.
    if let param = p[int: 4]?.bytes {
      guard let version = p[int: 3]?.int, profile.pinProtocols.contains(version) else {
        return .failure(.init(.missingParameter))
      }
      let message =
        [UInt8](repeating: 0xFF, count: 32) + [0x0D, UInt8(truncatingIfNeeded: sub)]
        + (params?.encoded() ?? [])
      guard PinProtocol(version: version).verify(pinToken, message, param, isToken: true) else {
        return .failure(.init(.pinAuthInvalid))
      }
      guard tokenPermissions & 0x20 != 0 else { return .failure(.init(.pinAuthInvalid)) }
    } else if state.pinHash != nil {
      return .failure(.init(.puatRequired))
    }
    guard sub == 0x03 else { return .failure(.init(.invalidSubcommand)) }
    // setMinPINLength: newMinPINLength (0x01), minPinLengthRPIDs (0x02, not kept), forceChangePin (0x03).
    let newLength = params?[int: 1]?.int ?? state.minPINLength
    let force = params?[int: 3]?.bool ?? false
    guard newLength >= state.minPINLength, newLength <= 63 else { return .failure(.init(.pinPolicyViolation)) }
    if force && state.pinHash == nil { return .failure(.init(.pinNotSet)) }
    state.minPINLength = newLength
    if force { state.forcePINChange = true }
    changed()
    return .success(nil)
  }
}
