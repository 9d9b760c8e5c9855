import SystemCrypto
import Foundation

/// authenticatorClientPIN (CTAP 2.1 §6.5).
extension VirtualFIDO2Key.Processor {
  func clientPIN(_ p: CBOR) -> Result<CBOR?, CTAP2Error> {
    guard let sub = p[int: 2]?.int else { return .failure(.init(.missingParameter)) }
    let refused = CTAP2Error(profile.unsupportedPINRequest.status)
    if profile.lockoutRefusesEverything, [0x03, 0x04, 0x05].contains(sub), let e = lockout() {
      return .failure(.init(e))
    }
    // getRetries: libfido2 always names protocol 1 here; any supported protocol (or none) is fine, unless the
    // profile checks it as for every other subcommand.
    if sub == 0x01 && !profile.getRetriesChecksProtocol {
      return .success(retries())
    }
    guard let version = p[int: 1]?.int else { return .failure(.init(.missingParameter)) }
    guard profile.pinProtocols.contains(version) else { return .failure(refused) }
    if sub == 0x01 { return .success(retries()) }
    if sub == 0x09 && !profile.tokenWithPermissions { return .failure(refused) }
    let proto = PinProtocol(version: version)
    switch sub {
    case 0x02:
      return .success(.map((.int(1), coseKey(keyAgreement.publicKey.x963Representation, alg: -25))))
    case 0x03: return setPIN(p, proto).map { nil }
    case 0x04: return changePIN(p, proto).map { nil }
    case 0x05, 0x09: return pinToken(p, proto, withPermissions: sub == 0x09)
    default: return .failure(refused)
    }
  }

  /// getPINRetries' answer: pinRetries, and powerCycleState where the profile reports it.
  func retries() -> CBOR {
    guard profile.reportsPowerCycleState && !omitsPowerCycleState else {
      return .map((.int(3), .int(state.pinRetries)))
    }
    return .map((.int(3), .int(state.pinRetries)), (.int(4), .bool(powerCycleRequired)))
  }

  func shared(_ p: CBOR, _ proto: PinProtocol) -> Result<[UInt8], CTAP2Error> {
    guard let peer = p[int: 3] else { return .failure(.init(.missingParameter)) }
    guard let s = proto.sharedSecret(keyAgreement, peer: peer) else { return .failure(.init(.invalidParameter)) }
    return .success(s)
  }

  /// Decrypts newPinEnc (64 bytes of zero-padded UTF-8) and checks the policy.
  func newPIN(_ enc: [UInt8], _ key: [UInt8], _ proto: PinProtocol) -> Result<[UInt8], CTAP2Error> {
    guard let padded = proto.decrypt(key, enc), padded.count == 64 else {
      return .failure(.init(.invalidParameter))
    }
    let pin = Array(padded.prefix { $0 != 0 })
    guard padded[pin.count...].allSatisfy({ $0 == 0 }), pin.count < 64,
      let text = String(validating: pin, as: UTF8.self), text.unicodeScalars.count >= state.minPINLength
    else { return .failure(.init(.pinPolicyViolation)) }
    return .success(Array(SHA256.hash(data: pin).prefix(16)))
  }

  func setPIN(_ p: CBOR, _ proto: PinProtocol) -> Result<Void, CTAP2Error> {
    guard let param = p[int: 4]?.bytes, let enc = p[int: 5]?.bytes else { return .failure(.init(.missingParameter)) }
    guard state.pinHash == nil else { return .failure(.init(profile.setPINWhenSet.status)) }
    return shared(p, proto).flatMap { key in
      guard proto.verify(key, enc, param) else { return .failure(.init(.pinAuthInvalid)) }
      return newPIN(enc, key, proto).map { hash in
        state.pinHash = Data(hash)
        state.pinRetries = FIDO2State.maxRetries
        changed()
      }
    }
  }

  /// The PIN check shared by changePIN and the token requests: decrement first, compare, then the
  /// 3-consecutive-failures rule (CTAP 2.1 §6.5.5.5).
  func checkPIN(_ p: CBOR, _ key: [UInt8], _ proto: PinProtocol) -> Result<Void, CTAP2Error> {
    guard let pinHashEnc = p[int: 6]?.bytes else { return .failure(.init(.missingParameter)) }
    guard let stored = state.pinHash else { return .failure(.init(.pinNotSet)) }
    guard state.pinRetries > 0 else { return .failure(.init(.pinBlocked)) }
    guard !powerCycleRequired else { return .failure(.init(.pinAuthBlocked)) }
    state.pinRetries -= 1
    changed()
    guard let hash = proto.decrypt(key, pinHashEnc), hash.count == 16, constantTimeEqual(hash, Array(stored)) else {
      keyAgreement = P256.KeyAgreement.PrivateKey()
      consecutiveFailures += 1
      if state.pinRetries == 0 && profile.blockedOnLastFailure { return .failure(.init(.pinBlocked)) }
      if consecutiveFailures >= 3 {
        powerCycleRequired = true
        return .failure(.init(.pinAuthBlocked))
      }
      return .failure(.init(.pinInvalid))
    }
    state.pinRetries = FIDO2State.maxRetries
    consecutiveFailures = 0
    changed()
    return .success(())
  }

  func changePIN(_ p: CBOR, _ proto: PinProtocol) -> Result<Void, CTAP2Error> {
    guard let param = p[int: 4]?.bytes, let enc = p[int: 5]?.bytes, let hashEnc = p[int: 6]?.bytes else {
      return .failure(.init(.missingParameter))
    }
    guard state.pinHash != nil else { return .failure(.init(.pinNotSet)) }
    guard state.pinRetries > 0 else { return .failure(.init(.pinBlocked)) }
    guard !powerCycleRequired else { return .failure(.init(.pinAuthBlocked)) }
    return shared(p, proto).flatMap { key in
      guard proto.verify(key, enc + hashEnc, param) else { return .failure(.init(.pinAuthInvalid)) }
      return checkPIN(p, key, proto).flatMap { newPIN(enc, key, proto) }.map { hash in
        state.pinHash = Data(hash)
        state.forcePINChange = false
        pinToken = randomBytes(profile.pinTokenLength)  // changePIN invalidates existing tokens
        tokenPermissions = 0
        changed()
      }
    }
  }

  func pinToken(_ p: CBOR, _ proto: PinProtocol, withPermissions: Bool) -> Result<CBOR?, CTAP2Error> {
    var permissions = profile.legacyTokenPermissions  // legacy getPinToken: mc and ga in CTAP 2.1
    if withPermissions {
      guard let perm = p[int: 9]?.int, perm > 0, perm <= 0xFF else { return .failure(.init(.missingParameter)) }
      permissions = UInt8(perm)
      // mc (0x01), ga (0x02), cm (0x04: credential management), acfg (0x20) where authenticatorConfig is offered;
      // no be, lbw.
      let offered: UInt8 = configSupported ? 0x27 : 0x07
      guard permissions & ~offered == 0 else { return .failure(.init(.unauthorizedPermission)) }
    } else if p[int: 9] != nil || p[int: 10] != nil {
      return .failure(.init(.invalidParameter))
    }
    guard !state.forcePINChange else { return .failure(.init(.pinPolicyViolation)) }
    return shared(p, proto).flatMap { key in
      checkPIN(p, key, proto).flatMap {
        pinToken = randomBytes(profile.pinTokenLength)
        tokenPermissions = permissions
        tokenRPID = p[int: 10]?.text
        guard let enc = proto.encrypt(key, pinToken) else { return .failure(.init(.invalidParameter)) }
        return .success(.map((.int(2), .bytes(enc))))
      }
    }
  }

  /// Checks pinUvAuthParam of makeCredential/getAssertion; returns whether the user was verified.
  /// Without pinUvAuthParam: makeCredential on a key with a PIN wants one (PUAT_REQUIRED, no makeCredUvNotRqd);
  /// getAssertion goes on without user verification (CTAP 2.1 §6.2.2: only alwaysUv would refuse it).
  func verifyToken(
    _ p: CBOR, paramKey: Int, protocolKey: Int, cdh: [UInt8], permission: UInt8, rpID: String,
    requiredWithPIN: Bool = true
  ) -> Result<Bool, CTAP2Error> {
    guard let param = p[int: paramKey]?.bytes else {
      return state.pinHash == nil || !requiredWithPIN ? .success(false) : .failure(.init(.puatRequired))
    }
    guard let version = p[int: protocolKey]?.int, profile.pinProtocols.contains(version) else {
      return .failure(.init(.missingParameter))
    }
    if param.isEmpty {  // touch probe (CTAP 2.1 §6.1.2 step 1)
      if case .failure(let e) = touch() { return .failure(e) }
      return .failure(.init(state.pinHash == nil ? .pinNotSet : .pinInvalid))
    }
    guard PinProtocol(version: version).verify(pinToken, cdh, param, isToken: true) else {
      return .failure(.init(.pinAuthInvalid))
    }
    guard tokenPermissions & permission != 0, tokenRPID == nil || tokenRPID == rpID else {
      return .failure(.init(.pinAuthInvalid))
    }
    if profile.bindsTokenToRP { tokenRPID = rpID }
    return .success(true)
  }
}
