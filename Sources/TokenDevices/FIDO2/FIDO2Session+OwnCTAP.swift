import CFido2
import Crypto

/// The requests a session sends over its own channel (`CTAP2Link`) while no call has needed libfido2: getInfo,
/// the PIN and UV tries, the PIN protocol (key agreement, PIN token, setPIN, changePIN) and getAssertion with
/// hmac-secret. Request for request what libfido2 1.12 sends (pin.c, assert.c; `Tools/bench/fido2` and the tests
/// compare), except that getInfo is sent only when a caller needs what it says: without it, the PIN protocol is
/// the newest the key takes (2, else 1) and the PIN token the CTAP 2.1 one with permissions (else the legacy one),
/// each found by the key's refusal, which spends no PIN try (HardwareNotes.md, "PIN protocol of our own").
extension FIDO2Session {
  typealias Item = FIDO2GetInfo.Item

  /// getInfo over the link.
  func linkInfo(_ link: CTAP2Link) throws(TokenError) -> FIDO2Info {
    trace?("fido2 > getInfo")
    let (status, body) = try link.cbor([0x04], operation: "getInfo", ms: deadlines.probeMs)
    guard status == 0 else { throw Self.error(Int32(status), "getInfo") }
    guard let info = FIDO2GetInfo.parse(body) else { throw .malformedResponse(operation: "getInfo") }
    trace?("fido2 < getInfo: \(body.count) bytes")
    return info
  }

  /// One clientPIN request (CTAP 2.1 §6.5.5): its status, and the response map when the status is 0.
  func clientPIN(_ link: CTAP2Link, _ fields: [(Int, Item)], operation: String, ms: Int32) throws(TokenError)
    -> (status: UInt8, map: [(Item, Item)])
  {
    let request = [0x06] + CTAP2CBOR.encode(.map(fields.map { (CTAP2CBOR.int($0.0), $0.1) }))
    let (status, body) = try link.cbor(request, operation: operation, ms: ms)
    guard status == 0 else { return (status, []) }
    if body.isEmpty { return (0, []) }
    guard let map = CTAP2CBOR.map(body) else { throw .malformedResponse(operation: operation) }
    return (0, map)
  }

  /// getPINRetries (0x01, pinRetries 3) or getUVRetries (0x07, uvRetries 5), as libfido2 asks: protocol 1.
  func linkRetries(_ link: CTAP2Link, uv: Bool) throws(TokenError) -> Int {
    let operation = uv ? "getUVRetries" : "getPINRetries"
    trace?("fido2 > clientPIN \(operation)")
    let (status, map) = try clientPIN(
      link, [(1, .unsigned(1)), (2, .unsigned(uv ? 7 : 1))], operation: operation,
      ms: deadlines.probeMs)
    guard status == 0 else { throw Self.error(Int32(status), operation) }
    guard case .unsigned(let n)? = CTAP2CBOR.field(map, uv ? 5 : 3), n <= 255 else {
      throw .malformedResponse(operation: operation)
    }
    if !uv {
      powerCycleState = CTAP2CBOR.powerCycleState(map)
      trace?("fido2 < \(operation): \(n)\(powerCycleRequired ? ", power cycle required" : "")")
    } else {
      trace?("fido2 < \(operation): \(n)")
    }
    return Int(n)
  }

  /// getKeyAgreement and the ECDH: protocol 2 when the key takes it (getInfo's pinUvAuthProtocols when known, else
  /// tried first), else 1.
  func keyAgreement(_ link: CTAP2Link, operation: String) throws(TokenError) -> CTAP2PinProtocol {
    let versions: [Int]
    if let known = knownInfo?.pinProtocols, !known.isEmpty {
      versions = [2, 1].filter(known.contains)
      guard !versions.isEmpty else { throw .unsupported("a PIN protocol TokenBridge speaks (1 or 2)") }
    } else {
      versions = [2, 1]
    }
    var refusal: UInt8 = 0
    for v in versions {
      trace?("fido2 > clientPIN getKeyAgreement (protocol \(v))")
      let (status, map) = try clientPIN(
        link, [(1, .unsigned(UInt64(v))), (2, .unsigned(2))], operation: operation,
        ms: deadlines.commandMs)
      guard status == 0 else {
        refusal = status
        continue
      }
      guard let key = CTAP2CBOR.field(map, 1), let p = CTAP2PinProtocol(version: v, authenticatorKey: key) else {
        throw .malformedResponse(operation: "\(operation) key agreement")
      }
      return p
    }
    throw Self.error(Int32(refusal), operation)
  }

  /// A PIN token for `permissions` (mc 0x01, ga 0x02) on `rpID`: getPinUvAuthTokenUsingPinWithPermissions (0x09)
  /// when the key has `pinUvAuthToken` (or getInfo was not read and it does not refuse the subcommand), else the
  /// legacy getPinToken (0x05). A wrong PIN throws `.wrongPIN` with the tries read afterwards.
  func pinToken(
    _ link: CTAP2Link, _ p: CTAP2PinProtocol, pin: [UInt8], permissions: UInt8, rpID: String, operation: String
  ) throws(TokenError) -> [UInt8] {
    var hash = Array(SHA256.hash(data: pin).prefix(16))
    defer { wipe(&hash) }
    guard let pinHashEnc = p.encrypt(hash) else { throw .fido2(FIDO_ERR_INTERNAL, operation: operation) }
    var withPermissions = knownInfo.map { $0.options["pinUvAuthToken"] == true } ?? true
    while true {
      var fields: [(Int, Item)] = [
        (1, .unsigned(UInt64(p.version))), (2, .unsigned(withPermissions ? 9 : 5)), (3, p.platformKey),
        (6, .bytes(pinHashEnc)),
      ]
      if withPermissions { fields += [(9, .unsigned(UInt64(permissions))), (10, .text(rpID))] }
      trace?(
        "fido2 > clientPIN \(withPermissions ? "getPinUvAuthTokenUsingPinWithPermissions" : "getPinToken") <redacted>")
      let (status, map) = try clientPIN(link, fields, operation: operation, ms: deadlines.commandMs)
      // A key without the CTAP 2.1 subcommand refuses it before it looks at the PIN: no try spent.
      if knownInfo == nil, withPermissions, [0x01, 0x02, 0x3E].contains(status) {
        withPermissions = false
        continue
      }
      if let refused = answer(link, status, operation) {
        // 0x37: the PIN was right, but the key wants it changed (forcePINChange).
        throw status == 0x37 ? .pinChangeRequired : refused
      }
      // The caller wipes the token when its request is made.
      guard case .bytes(let enc)? = CTAP2CBOR.field(map, 2), var token = p.decrypt(enc) else {
        throw .malformedResponse(operation: "\(operation) PIN token")
      }
      guard token.count == 16 || token.count == 32 else {
        wipe(&token)
        throw .malformedResponse(operation: "\(operation) PIN token")
      }
      return token
    }
  }

  /// setPIN (0x03, `old` nil) or changePIN (0x04) over the link.
  func linkSetPIN(_ link: CTAP2Link, _ new: [UInt8], old: [UInt8]?) throws(TokenError) {
    let operation = old == nil ? "setPIN" : "changePIN"
    guard new.count <= 63 else { throw .pinFormat(.pin, .tooLong(maximum: 63)) }
    var p = try keyAgreement(link, operation: operation)
    defer { p.wipe() }
    var padded = new + [UInt8](repeating: 0, count: 64 - new.count)
    defer { wipe(&padded) }
    guard let newPinEnc = p.encrypt(padded) else { throw .fido2(FIDO_ERR_INTERNAL, operation: operation) }
    var fields: [(Int, Item)] = [(1, .unsigned(UInt64(p.version))), (3, p.platformKey), (5, .bytes(newPinEnc))]
    if let old {
      var hash = Array(SHA256.hash(data: old).prefix(16))
      defer { wipe(&hash) }
      guard let pinHashEnc = p.encrypt(hash) else { throw .fido2(FIDO_ERR_INTERNAL, operation: operation) }
      fields += [(2, .unsigned(4)), (4, .bytes(p.authenticate(newPinEnc + pinHashEnc))), (6, .bytes(pinHashEnc))]
    } else {
      fields += [(2, .unsigned(3)), (4, .bytes(p.authenticate(newPinEnc)))]
    }
    trace?("fido2 > clientPIN \(operation) <redacted>")
    let (status, _) = try clientPIN(link, fields, operation: operation, ms: deadlines.commandMs)
    if let refused = answer(link, status, operation) { throw refused }
    infoChanged()  // clientPin is now true, forcePINChange false
  }

  /// getAssertion with hmac-secret over the link: key agreement once (the PIN token and the salt share it), the
  /// PIN token with the ga permission, then the assertion; returns the decrypted output for `salt` (32 bytes).
  func linkHmacSecret(
    _ link: CTAP2Link, rpID: String, clientDataHash: [UInt8], credentialID: [UInt8], salt: [UInt8], pin: [UInt8]?
  ) throws(TokenError) -> [UInt8] {
    let operation = "getAssertion"
    guard salt.count == 32, clientDataHash.count == 32 else {
      throw .fido2(FIDO_ERR_INVALID_ARGUMENT, operation: operation)
    }
    var p = try keyAgreement(link, operation: operation)
    defer { p.wipe() }
    var fields: [(Int, Item)] = [
      (1, .text(rpID)), (2, .bytes(clientDataHash)),
      (3, .array([.map([(.text("id"), .bytes(credentialID)), (.text("type"), .text("public-key"))])])),
    ]
    guard let saltEnc = p.encrypt(salt) else { throw .fido2(FIDO_ERR_INTERNAL, operation: operation) }
    var hmac: [(Item, Item)] = [
      (CTAP2CBOR.int(1), p.platformKey), (CTAP2CBOR.int(2), .bytes(saltEnc)),
      (CTAP2CBOR.int(3), .bytes(p.authenticate(saltEnc))),
    ]
    if p.version == 2 { hmac.append((CTAP2CBOR.int(4), .unsigned(2))) }  // absent for protocol 1, as libfido2
    fields += [(4, .map([(.text("hmac-secret"), .map(hmac))])), (5, .map([(.text("up"), .bool(true))]))]
    if let pin {
      var token = try pinToken(link, p, pin: pin, permissions: 0x02, rpID: rpID, operation: operation)
      defer { wipe(&token) }
      fields += [
        (6, .bytes(CTAP2PinProtocol.authenticate(version: p.version, key: token, clientDataHash))),
        (7, .unsigned(UInt64(p.version))),
      ]
    }
    trace?("fido2 > getAssertion rp=\(rpID) hmac-secret")
    let request = [0x02] + CTAP2CBOR.encode(.map(fields.map { (CTAP2CBOR.int($0.0), $0.1) }))
    canceller.arm(link)
    defer { canceller.disarm() }
    let (status, body) = try link.cbor(
      request, operation: operation, ms: deadlines.userPresenceMs, touchCue: touchCue)
    if let refused = answer(link, status, operation) { throw refused }
    guard let map = CTAP2CBOR.map(body), case .bytes(let authData)? = CTAP2CBOR.field(map, 2),
      let encrypted = Self.hmacSecretOutput(authData), var output = p.decrypt(encrypted), output.count == 32
    else { throw .malformedResponse(operation: "getAssertion hmac-secret") }
    // UV must have happened when a PIN token authorized it: the output is then CredRandomWithUV's (§12.5).
    guard pin == nil || authData[32] & 0x04 != 0 else {
      wipe(&output)
      throw .malformedResponse(operation: "getAssertion hmac-secret (no user verification)")
    }
    return output
  }

  /// makeCredential with hmac-secret over the link (ES256; discoverable when `resident`): key agreement and a PIN
  /// token with the mc permission when `pin` is given; returns the credential ID from the attested credential data.
  /// The attestation is not checked (libfido2's `fido_dev_make_cred` does not either): TokenBridge only keeps the ID.
  func linkMakeCredential(
    _ link: CTAP2Link, for owner: FIDO2CredentialOwner, clientDataHash: [UInt8], pin: [UInt8]?, resident: Bool
  ) throws(TokenError) -> [UInt8] {
    let operation = "makeCredential"
    var fields: [(Int, Item)] = [
      (1, .bytes(clientDataHash)),
      (2, .map([(.text("id"), .text(owner.rpID)), (.text("name"), .text(owner.rpName))])),
      (
        3,
        .map([
          (.text("id"), .bytes(owner.userID)), (.text("name"), .text(owner.userName)),
          (.text("displayName"), .text(owner.userDisplayName)),
        ])
      ),
      (4, .array([.map([(.text("alg"), CTAP2CBOR.int(-7)), (.text("type"), .text("public-key"))])])),
      (6, .map([(.text("hmac-secret"), .bool(true))])),
    ]
    if resident { fields.append((7, .map([(.text("rk"), .bool(true))]))) }
    if let pin {
      var p = try keyAgreement(link, operation: operation)
      defer { p.wipe() }
      var token = try pinToken(link, p, pin: pin, permissions: 0x01, rpID: owner.rpID, operation: operation)
      defer { wipe(&token) }
      fields += [
        (8, .bytes(CTAP2PinProtocol.authenticate(version: p.version, key: token, clientDataHash))),
        (9, .unsigned(UInt64(p.version))),
      ]
    }
    trace?("fido2 > makeCredential rp=\(owner.rpID) hmac-secret")
    canceller.arm(link)
    defer { canceller.disarm() }
    let (status, body) = try link.cbor(
      [0x01] + CTAP2CBOR.encode(.map(fields.map { (CTAP2CBOR.int($0.0), $0.1) })), operation: operation,
      ms: deadlines.userPresenceMs, touchCue: touchCue)
    if let refused = answer(link, status, operation) { throw refused }
    // authData: rpIdHash 32, flags 1 (AT 0x40), signCount 4, AAGUID 16, credential ID length 2, credential ID.
    guard let map = CTAP2CBOR.map(body), case .bytes(let authData)? = CTAP2CBOR.field(map, 2), authData.count >= 55,
      authData[32] & 0x40 != 0
    else { throw .malformedResponse(operation: operation) }
    let length = Int(authData[53]) << 8 | Int(authData[54])
    guard length > 0, authData.count >= 55 + length else { throw .malformedResponse(operation: operation) }
    if resident { infoChanged() }  // remainingDiscoverableCredentials went down
    return Array(authData[55..<55 + length])
  }

  /// The "hmac-secret" extension output in authenticator data (rpIdHash 32, flags 1, signCount 4, attested
  /// credential data when AT 0x40, extensions when ED 0x80); nil when it is not there or the data is malformed.
  static func hmacSecretOutput(_ authData: [UInt8]) -> [UInt8]? {
    guard authData.count > 37, authData[32] & 0x80 != 0 else { return nil }
    var offset = 37
    if authData[32] & 0x40 != 0 {
      guard authData.count >= offset + 18 else { return nil }
      let idLength = Int(authData[offset + 16]) << 8 | Int(authData[offset + 17])
      offset += 18 + idLength
      guard offset < authData.count else { return nil }
      var reader = FIDO2GetInfo.Reader(bytes: Array(authData[offset...]))
      guard (try? reader.item(depth: 0)) != nil else { return nil }
      offset += reader.offset
    }
    guard offset < authData.count, let extensions = CTAP2CBOR.map(Array(authData[offset...])),
      case .bytes(let out)? = extensions.first(where: { $0.0 == .text("hmac-secret") })?.1
    else { return nil }
    return out
  }

  /// Traces the key's answer to a request and returns the error it means, nil for success: a wrong PIN (0x31) with
  /// the tries read right after (reading spends none), any other status as `FIDO2Session.error` says it.
  func answer(_ link: CTAP2Link, _ status: UInt8, _ operation: String) -> TokenError? {
    trace?("fido2 < \(status == 0 ? "OK" : TokenError.fido2Message(Int32(status)))")
    guard status != 0 else { return nil }
    if status == 0x31 { return .wrongPIN(.pin, retriesLeft: (try? linkRetries(link, uv: false)) ?? 0) }
    return Self.error(Int32(status), operation)
  }
}
