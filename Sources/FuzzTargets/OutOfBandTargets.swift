import SystemCrypto
import Foundation
import TokenBridge
import UAFCore

/// This device's encryption key in the fuzz targets (fixed, so seeds can hold payloads encrypted for it), and the
/// sender's ephemeral key of the JWEs the `jwe` target builds.
enum FuzzKeys {
  static let device = try! P256.KeyAgreement.PrivateKey(rawRepresentation: [UInt8](repeating: 0x11, count: 32))
  static let ephemeral = try! P256.KeyAgreement.PrivateKey(rawRepresentation: [UInt8](repeating: 0x22, count: 32))
  static var decrypter: PayloadDecrypter { PayloadDecrypter { device } }
  /// The ECDH secret of `ephemeral` and `device` (what the sender derives the content key from).
  static let z: [UInt8] = try! ephemeral.sharedSecretFromKeyAgreement(with: device.publicKey).withUnsafeBytes {
    [UInt8]($0)
  }
}

/// Out-of-band payloads as they arrive: a QR code's text, a link (https or x-callback-url), a push data map, or a
/// scanned text of either kind (first byte picks). Whatever decodes has its fields in bounds, names the operation
/// its redeem URL names, has a server origin that reads back as the redeem URL's host and port, and, written back
/// as a plain payload JSON, decodes (as push data and as QR text) to the same payload.
enum OutOfBandPayloadTarget {
  static func run(_ data: [UInt8]) {
    guard let selector = data.first else { return }
    let body = Array(data.dropFirst())
    let text = String(decoding: body, as: UTF8.self)
    let source: OutOfBandSource
    switch selector % 4 {
    case 0: source = .qrText(text)
    case 1: source = .link(text)
    case 2: source = .push(body)
    default: source = OutOfBandSource.scanned(text)
    }
    guard let p = try? OutOfBandPayload(source, decrypter: FuzzKeys.decrypter) else { return }
    check(!p.token.isEmpty && p.token.utf8.count <= 512, "token of \(p.token.utf8.count) bytes")
    check(LoopbackHost.isAllowed(p.redeemURL), "a redeem URL that is neither https nor loopback http")
    let path = p.redeemURL.path
    let suffix = [
      "/redeem/registration": UAFOperation.reg, "/redeem/authentication": .auth,
      "/redeem/deregistration": .dereg,
    ].first { path.hasSuffix($0.key) }
    check(suffix?.value == p.operation, "the operation is not the one the redeem URL names")
    if let origin = URL(string: p.serverOrigin) {
      check(
        origin.host == p.redeemURL.host && origin.port == p.redeemURL.port,
        "the server origin names another server than the redeem URL")
    }
    if p.callback != nil {
      guard case .link(let link) = source else { return check(false, "a callback from a payload that was no link") }
      check(URLComponents(string: link)?.host == "x-callback-url", "a callback from a link that is no x-callback-url")
    }
    // Written back as a plain payload, it decodes to the same payload (whichever way it came).
    var fields: [String: Any] = ["token": p.token, "redeem_url": p.redeemURL.absoluteString]
    if let d = p.data { fields["data"] = d }
    var object: [String: Any] = ["nma_data": fields]
    if let v = p.version { object["nma_data_version"] = v }
    guard let json = try? JSONSerialization.data(withJSONObject: object) else {
      return check(false, "a decoded payload cannot be written as JSON")
    }
    var plain = p
    plain.callback = nil
    plain.encrypted = false
    do {
      let again = try OutOfBandPayload(.push(Array(json)))
      check(again == plain, "the payload written back decodes to another one")
      let viaQR = try OutOfBandPayload(.qrText(Base64URL.encode(Array(json))))
      check(viaQR == again, "push and QR text disagree")
    } catch {
      check(false, "the payload written back does not decode: \(error)")
    }
  }
}

/// x-callback targets and the allow-list (`CallbackPolicy`, `CallbackURL`): lines before the last are the
/// allow-list entries, the last is the target. Whatever is accepted is printable ASCII without spaces or
/// backslashes, its serialization starts with its origin (no userinfo) and reads back to itself; whatever the
/// policy opens has an origin that the allow-list, read by the same rule, holds, and is opened as itself again.
enum CallbackURLTarget {
  static func run(_ data: [UInt8]) {
    let lines = data.split(separator: 0x0A, omittingEmptySubsequences: false).map {
      String(decoding: $0, as: UTF8.self)
    }
    guard let target = lines.last else { return }
    let allowed = Array(lines.dropLast().prefix(8))
    for entry in allowed {
      guard let origin = CallbackURL.allowListEntry(entry) else { continue }
      check(CallbackURL.allowListEntry(origin) == origin, "an allow-list entry's origin is no entry of itself")
    }
    guard let url = CallbackURL(target) else {
      check(CallbackPolicy(allowed: allowed).opened(target) == nil, "a target that is no URL was opened")
      return
    }
    let s = Array(url.serialized.utf8)
    check(
      s.allSatisfy { $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\\") },
      "the serialization holds a space, a control, a backslash or non-ASCII")
    if url.origin.hasPrefix("https://") {
      check(url.serialized.hasPrefix(url.origin + "/"), "an https serialization does not start with its origin")
      let authority = url.origin.dropFirst("https://".count)
      check(!authority.isEmpty && !authority.contains("@"), "an origin with userinfo or no host")
    } else {
      check(url.origin.hasSuffix(":") && url.serialized.hasPrefix(url.origin), "a scheme origin is not the scheme")
    }
    check(CallbackURL(url.serialized) == url, "the serialization does not read back to itself")
    let policy = CallbackPolicy(allowed: allowed)
    if let opened = policy.opened(target) {
      check(opened == url.serialized, "what is opened is not the serialization")
      let origins = allowed.compactMap(CallbackURL.allowListEntry)
      check(CallbackURL(opened).map { origins.contains($0.origin) } == true, "opened an origin not on the list")
      check(policy.opened(opened) == opened, "what is opened would not be opened again")
    } else {
      check(!allowed.compactMap(CallbackURL.allowListEntry).contains(url.origin), "an allowed origin was refused")
    }
  }
}

/// Compact JWE (`PayloadDecrypter.decrypt`), with this device's key. Even first byte: the rest is the JWE text;
/// whatever decrypts was five parts, no encrypted key, and gives as many bytes as the ciphertext held. Odd: the
/// rest is a plaintext, `apu`/`apv` and a flip; the target encrypts it for the device as the sender would, changes
/// one character when the flip says so, and the decrypter must give the plaintext back (never another one).
enum JWETarget {
  static func run(_ data: [UInt8]) {
    var input = FuzzInput(data)
    let selector = input.byte()
    if selector & 1 == 0 {
      let jwe = String(decoding: input.rest(), as: UTF8.self)
      guard let plain = try? FuzzKeys.decrypter.decrypt(jwe) else { return }
      let parts = jwe.split(separator: ".", omittingEmptySubsequences: false)
      check(parts.count == 5 && parts[1].isEmpty, "a JWE that is not five parts without a key decrypted")
      check(Base64URL.decode(String(parts[3]))?.count == plain.count, "plaintext and ciphertext differ in length")
      return
    }
    let apu = (selector & 2) != 0 ? input.take(Int(input.byte()) % 48) : nil
    let apv = (selector & 4) != 0 ? input.take(Int(input.byte()) % 48) : nil
    let flip = (selector & 8) != 0 ? (Int(input.byte()) << 8 | Int(input.byte()), input.byte()) : nil
    let plaintext = input.rest()
    let raw = Array(FuzzKeys.ephemeral.publicKey.x963Representation)
    var header =
      #"{"alg":"ECDH-ES","enc":"A256GCM","epk":{"kty":"EC","crv":"P-256","x":"\#(Base64URL.encode(Array(raw[1..<33])))","y":"\#(Base64URL.encode(Array(raw[33...])))"}"#
    if let apu { header += #","apu":"\#(Base64URL.encode(apu))""# }
    if let apv { header += #","apv":"\#(Base64URL.encode(apv))""# }
    let protected = Base64URL.encode(Array((header + "}").utf8))
    let key = PayloadDecrypter.concatKDF(
      z: FuzzKeys.z, algorithmID: Array("A256GCM".utf8), apu: apu ?? [], apv: apv ?? [], bits: 256)
    let nonce = AES.GCM.Nonce()
    guard
      let box = try? AES.GCM.seal(
        plaintext, using: SymmetricKey(data: key), nonce: nonce, authenticating: Array(protected.utf8))
    else { return check(false, "AES-GCM seal failed") }
    var jwe = Array(
      [
        protected, "", Base64URL.encode(Array(nonce)), Base64URL.encode(Array(box.ciphertext)),
        Base64URL.encode(Array(box.tag)),
      ].joined(separator: ".").utf8)
    if let (at, with) = flip, jwe[at % jwe.count] != with {
      jwe[at % jwe.count] = with
      if let got = try? FuzzKeys.decrypter.decrypt(String(decoding: jwe, as: UTF8.self)) {
        check(got == plaintext, "an altered JWE decrypted to another plaintext")
      }
      return
    }
    do {
      let got = try FuzzKeys.decrypter.decrypt(String(decoding: jwe, as: UTF8.self))
      check(got == plaintext, "a JWE for this device decrypted to another plaintext")
    } catch {
      check(false, "a well-formed JWE for this device was refused: \(error)")
    }
  }
}

/// What the server answers the device service: Get Device Credentials (even first byte) and the pending
/// operations (odd). A device answer, written back as JSON, reads to the same view. A pending operation's payload
/// decodes as it did when decoded again, and through its QR text (what `oob --qr-text` runs) to the same payload;
/// the answer rebuilt around the payload bytes kept reads to the same bytes.
enum DeviceAnswerTarget {
  struct Answer: Encodable {
    struct Target: Encodable {
      var id: String
      var username: String
      var name: String
      var target: String?
    }
    struct Credential: Encodable {
      var aaid: String
      var keyId: String
      var username: String
    }
    var dispatchTargets: [Target]
    var credentials: [Credential]
  }

  static func run(_ data: [UInt8]) {
    guard let selector = data.first else { return }
    let body = Data(data.dropFirst())
    if selector & 1 == 0 {
      guard let view = DeviceWire.deviceView(body) else { return }
      let answer = Answer(
        dispatchTargets: view.targets.map {
          .init(id: $0.id, username: $0.username, name: $0.name, target: $0.pushToken)
        },
        credentials: view.credentials.map { .init(aaid: $0.aaid, keyId: $0.keyID, username: $0.username) })
      guard let json = try? JSONEncoder().encode(answer) else { return check(false, "a view cannot be written") }
      check(DeviceWire.deviceView(json) == view, "a device answer written back reads to another view")
      return
    }
    let server = "https://fuzz.example"
    guard let operations = DeviceWire.pendingOperations(body, server: server, decrypter: FuzzKeys.decrypter) else {
      return
    }
    for op in operations {
      check(op.server == server, "an operation of another server")
      let again = Result { () throws(OutOfBandError) in
        try OutOfBandPayload(json: op.payloadJSON, decrypter: FuzzKeys.decrypter)
      }
      check(same(again, op.payload), "the payload decodes otherwise the second time")
      if case .success(let p) = op.payload {
        let viaQR = try? OutOfBandPayload(.qrText(op.qrText), decrypter: FuzzKeys.decrypter)
        check(viaQR == p, "the pending operation's QR text decodes to another payload")
        check(op.operationName != nil, "a decoded payload without an operation name")
      }
      // The payload bytes kept are a fixed point: an answer around them reads them back unchanged.
      guard let id = try? JSONEncoder().encode(op.id) else { return check(false, "an id cannot be written") }
      let rebuilt =
        Array(#"{"operations":[{"id":"#.utf8) + Array(id) + Array(#","creationTimeInEpochMillis":"#.utf8)
        + Array(String(op.creationTimeInEpochMillis).utf8) + Array(#","payload":"#.utf8) + op.payloadJSON
        + Array("}]}".utf8)
      let reread = DeviceWire.pendingOperations(Data(rebuilt), server: server, decrypter: FuzzKeys.decrypter)
      check(reread?.count == 1, "an answer rebuilt around a kept payload does not read")
      if let r = reread?.first {
        check(r.payloadJSON == op.payloadJSON && r.id == op.id, "the kept payload bytes are no fixed point")
      }
    }
  }

  static func same(_ a: Result<OutOfBandPayload, OutOfBandError>, _ b: Result<OutOfBandPayload, OutOfBandError>)
    -> Bool
  {
    switch (a, b) {
    case (.success(let x), .success(let y)): x == y
    case (.failure(let x), .failure(let y)): x == y
    default: false
    }
  }
}
