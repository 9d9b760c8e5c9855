import SystemCrypto
import Foundation

/// authenticatorMakeCredential / authenticatorGetAssertion (CTAP 2.1 §6.1, §6.2) with ES256 and hmac-secret
/// (§12.5). A credential ID is a random handle into the state file; discoverable (rk) credentials also keep the
/// RP and user names for credential management.
extension VirtualFIDO2Key.Processor {
  func makeCredential(_ p: CBOR) -> Result<CBOR?, CTAP2Error> {
    guard let cdh = p[int: 1]?.bytes, let rp = p[int: 2], let rpID = rp[text: "id"]?.text, let user = p[int: 3],
      let userID = user[text: "id"]?.bytes, let algs = p[int: 4]?.array
    else { return .failure(.init(.missingParameter)) }
    guard algs.contains(where: { $0[text: "alg"]?.int == -7 && $0[text: "type"]?.text == "public-key" }) else {
      return .failure(.init(.unsupportedAlgorithm))
    }
    let resident = p[int: 7]?[text: "rk"]?.bool == true
    let uv: Bool
    // makeCredUvNotRqd: a non-discoverable credential needs no token on a key with a PIN (CTAP 2.1 §6.1.2 step 10).
    let tokenRequired = resident || profile.option("makeCredUvNotRqd") != true
    switch verifyToken(
      p, paramKey: 8, protocolKey: 9, cdh: cdh, permission: 0x01, rpID: rpID, requiredWithPIN: tokenRequired)
    {
    case .success(let v): uv = v
    case .failure(let e): return .failure(e)
    }
    let rpHash = Data(SHA256.hash(data: Array(rpID.utf8)))
    for ex in p[int: 5]?.array ?? [] {
      if let id = ex[text: "id"]?.bytes,
        state.credentials.contains(where: { $0.id == Data(id) && $0.rpIDHash == rpHash })
      {
        _ = touch()
        return .failure(.init(.credentialExcluded))
      }
    }
    // A discoverable credential for the same RP and user replaces the old one (CTAP 2.1 §6.1.2 step 17).
    let replaces = { (c: FIDO2State.Credential) in
      c.resident == true && c.rpIDHash == rpHash && c.userID == Data(userID)
    }
    if resident, !state.credentials.contains(where: replaces), state.residentCount >= FIDO2State.maxResident {
      return .failure(.init(.keyStoreFull))
    }
    if case .failure(let e) = touch() { return .failure(e) }
    let hmac = p[int: 6]?[text: "hmac-secret"]?.bool == true
    let key = P256.Signing.PrivateKey()
    var cred = FIDO2State.Credential(
      id: Data(randomBytes(32)), rpIDHash: rpHash, privateKey: key.rawRepresentation,
      credRandomWithUV: Data(randomBytes(32)), credRandomWithoutUV: Data(randomBytes(32)), userID: Data(userID),
      hmacSecret: hmac, resident: resident)
    cred.rpID = rpID
    cred.rpName = rp[text: "name"]?.text
    cred.userName = user[text: "name"]?.text
    cred.userDisplayName = user[text: "displayName"]?.text
    if resident { state.credentials.removeAll(where: replaces) }
    state.credentials.append(cred)
    state.signCount += 1
    changed()
    var flags: UInt8 = 0x01 | 0x40 | (uv ? 0x04 : 0)
    var ext: [UInt8] = []
    if hmac {
      flags |= 0x80
      ext = CBOR.map((.text("hmac-secret"), .bool(true))).encoded()
    }
    let attested =
      Array(state.aaguid) + [UInt8(cred.id.count >> 8), UInt8(cred.id.count & 0xFF)] + Array(cred.id)
      + coseKey(key.publicKey.x963Representation, alg: -7).encoded()
    let authData = Array(rpHash) + [flags] + bigEndian(state.signCount) + attested + ext
    // Packed self attestation: signed by the credential key over authData ‖ clientDataHash.
    guard let sig = try? key.signature(for: authData + cdh).derRepresentation else {
      return .failure(.init(.invalidParameter))
    }
    return .success(
      .map(
        (.int(1), .text("packed")), (.int(2), .bytes(authData)),
        (.int(3), .map((.text("alg"), .int(-7)), (.text("sig"), .bytes(Array(sig)))))))
  }

  func getAssertion(_ p: CBOR) -> Result<CBOR?, CTAP2Error> {
    guard let rpID = p[int: 1]?.text, let cdh = p[int: 2]?.bytes else { return .failure(.init(.missingParameter)) }
    let uv: Bool
    switch verifyToken(
      p, paramKey: 6, protocolKey: 7, cdh: cdh, permission: 0x02, rpID: rpID, requiredWithPIN: false)
    {
    case .success(let v): uv = v
    case .failure(let e): return .failure(e)
    }
    let rpHash = Data(SHA256.hash(data: Array(rpID.utf8)))
    let allowed = (p[int: 3]?.array ?? []).compactMap { $0[text: "id"]?.bytes }.map { Data($0) }
    // Without an allowList only discoverable (resident) credentials qualify (CTAP 2.1 §6.2.2 step 7).
    let match = { (c: FIDO2State.Credential) in
      c.rpIDHash == rpHash && (allowed.isEmpty ? c.resident == true : allowed.contains(c.id))
    }
    guard let index = state.credentials.firstIndex(where: match) else {
      return .failure(.init(.noCredentials))
    }
    let wantsUP = p[int: 5]?[text: "up"]?.bool ?? true
    if wantsUP, case .failure(let e) = touch() { return .failure(e) }
    let cred = state.credentials[index]
    var flags: UInt8 = (wantsUP ? 0x01 : 0) | (uv ? 0x04 : 0)
    var ext: [UInt8] = []
    if let hs = p[int: 4]?[text: "hmac-secret"] {
      guard cred.hmacSecret else { return .failure(.init(.unsupportedOption)) }
      switch hmacSecret(hs, cred, uv: uv) {
      case .success(let out):
        flags |= 0x80
        ext = CBOR.map((.text("hmac-secret"), .bytes(out))).encoded()
      case .failure(let e): return .failure(e)
      }
    }
    state.signCount += 1
    changed()
    let authData = Array(rpHash) + [flags] + bigEndian(state.signCount) + ext
    guard let key = try? P256.Signing.PrivateKey(rawRepresentation: cred.privateKey),
      let sig = try? key.signature(for: authData + cdh).derRepresentation
    else { return .failure(.init(.invalidParameter)) }
    return .success(
      .map(
        (.int(1), .map((.text("id"), .bytes(Array(cred.id))), (.text("type"), .text("public-key")))),
        (.int(2), .bytes(authData)), (.int(3), .bytes(Array(sig)))))
  }

  /// hmac-secret output: encrypt(S, HMAC-SHA-256(CredRandom, salt1) [‖ … salt2]).
  func hmacSecret(_ hs: CBOR, _ cred: FIDO2State.Credential, uv: Bool) -> Result<[UInt8], CTAP2Error> {
    guard let peer = hs[int: 1], let saltEnc = hs[int: 2]?.bytes, let saltAuth = hs[int: 3]?.bytes else {
      return .failure(.init(.missingParameter))
    }
    let proto = PinProtocol(version: hs[int: 4]?.int ?? 1)
    guard profile.pinProtocols.contains(proto.version), let key = proto.sharedSecret(keyAgreement, peer: peer) else {
      return .failure(.init(.invalidParameter))
    }
    guard proto.verify(key, saltEnc, saltAuth) else { return .failure(.init(.pinAuthInvalid)) }
    guard let salts = proto.decrypt(key, saltEnc), salts.count == 32 || salts.count == 64 else {
      return .failure(.init(.invalidLength))
    }
    let secret = SymmetricKey(data: uv ? cred.credRandomWithUV : cred.credRandomWithoutUV)
    var out = Array(HMAC<SHA256>.authenticationCode(for: Array(salts[0..<32]), using: secret))
    if salts.count == 64 { out += HMAC<SHA256>.authenticationCode(for: Array(salts[32..<64]), using: secret) }
    guard let enc = proto.encrypt(key, out) else { return .failure(.init(.invalidParameter)) }
    return .success(enc)
  }
}

func bigEndian(_ v: UInt32) -> [UInt8] {
  [UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)]
}
