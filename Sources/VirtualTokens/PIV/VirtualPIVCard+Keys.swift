import CLibCrypto
import Foundation
import SystemCrypto

/// Management key, key generation, signing, data objects and metadata.
extension VirtualPIVCard {
  static let keySlots: Set<UInt8> = Set([0x9A, 0x9C, 0x9D, 0x9E] + Array(0x82...0x95))
  /// Objects readable only after PIN verification (SP 800-73-4 Part 1 Table 3: printed info, biometrics).
  static let pinProtectedObjects: Set<String> = ["5fc109", "5fc103", "5fc108", "5fc121"]

  var managementBlockSize: Int { state.managementAlgorithm == 0x03 ? 8 : 16 }

  func generalAuthenticate(p1: UInt8, p2: UInt8, data: [UInt8]) -> ([UInt8], UInt16) {
    guard let outer = parseTLV(data), outer.count == 1, outer[0].tag == 0x7C, let inner = parseTLV(outer[0].value)
    else { return ([], 0x6A80) }
    var fields: [UInt: [UInt8]] = [:]
    for t in inner { fields[t.tag] = t.value }
    if p2 == 0x9B { return managementAuthenticate(p1: p1, fields) }
    guard Self.keySlots.contains(p2) else { return ([], 0x6A88) }
    guard let key = state.keys[hexKey([p2])] else {
      return ([], profile.signEmptySlotStatus ?? profile.emptySlotStatus ?? 0x6A80)
    }
    guard key.algorithm == p1 else { return ([], 0x6A80) }
    // PIN policy: 1 never, 2 once, 3 always (always is treated as once here; see HardwareNotes.md).
    if key.pinPolicy != 1 && !pinVerified { return ([], 0x6982) }
    guard fields[0x82] == [], let digest = fields[0x81] else { return ([], 0x6A80) }
    do {
      let der: Data
      if p1 == 0x11 {
        guard digest.count == 32 else { return ([], 0x6A80) }
        der = try P256.Signing.PrivateKey(rawRepresentation: key.privateKey).signature(for: RawDigest(digest))
          .derRepresentation
      } else {
        guard digest.count == 48 else { return ([], 0x6A80) }
        der = try P384.Signing.PrivateKey(rawRepresentation: key.privateKey).signature(for: RawDigest(digest))
          .derRepresentation
      }
      return (tlv(0x7C, tlv(0x82, Array(der))), 0x9000)
    } catch {
      return ([], 0x6F00)
    }
  }

  func managementAuthenticate(p1: UInt8, _ f: [UInt: [UInt8]]) -> ([UInt8], UInt16) {
    guard p1 == state.managementAlgorithm else { return ([], 0x6A80) }
    let n = managementBlockSize
    if f[0x80] == [] {  // step 1 of mutual authentication: send E_K(witness)
      let w = randomBytes(n)
      witness = w
      guard let enc = blockCipher(w, encrypt: true) else { return ([], 0x6F00) }
      return (tlv(0x7C, tlv(0x80, enc)), 0x9000)
    }
    if let w = f[0x80], let c = f[0x81], c.count == n {  // step 2: check witness, answer E_K(challenge)
      defer { witness = nil }
      guard let expected = witness, constantTimeEqual(expected, w) else {
        managementAuthenticated = false
        return ([], 0x6982)
      }
      guard let enc = blockCipher(c, encrypt: true) else { return ([], 0x6F00) }
      managementAuthenticated = true
      return (tlv(0x7C, tlv(0x82, enc)), 0x9000)
    }
    if f[0x81] == [] {  // single authentication: send a plain challenge
      let c = randomBytes(n)
      challenge = c
      return (tlv(0x7C, tlv(0x81, c)), 0x9000)
    }
    if let r = f[0x82], let c = challenge {
      defer { challenge = nil }
      guard let enc = blockCipher(c, encrypt: true), constantTimeEqual(enc, r) else {
        managementAuthenticated = false
        return ([], 0x6982)
      }
      managementAuthenticated = true
      return ([], 0x9000)
    }
    return ([], 0x6A80)
  }

  func generate(p2: UInt8, data: [UInt8]) -> ([UInt8], UInt16) {
    guard managementAuthenticated else { return ([], 0x6982) }
    guard Self.keySlots.contains(p2) else { return ([], 0x6A88) }
    guard let outer = parseTLV(data), outer.first?.tag == 0xAC, let inner = parseTLV(outer[0].value),
      let alg = inner.first(where: { $0.tag == 0x80 })?.value.first
    else { return ([], 0x6A80) }
    let pinPolicy = inner.first { $0.tag == 0xAA }?.value.first ?? (p2 == 0x9E ? 1 : (p2 == 0x9C ? 3 : 2))
    let touchPolicy = inner.first { $0.tag == 0xAB }?.value.first ?? 1
    let priv: Data
    let point: Data
    switch alg {
    case 0x11:
      let k = P256.Signing.PrivateKey()
      priv = k.rawRepresentation
      point = k.publicKey.x963Representation
    case 0x14:
      let k = P384.Signing.PrivateKey()
      priv = k.rawRepresentation
      point = k.publicKey.x963Representation
    default: return ([], 0x6A80)
    }
    state.keys[hexKey([p2])] = .init(
      algorithm: alg, privateKey: priv, pinPolicy: pinPolicy == 0 ? 2 : pinPolicy,
      touchPolicy: touchPolicy == 0 ? 1 : touchPolicy, generated: true)
    changed()
    return (tlv(0x7F49, tlv(0x86, Array(point))), 0x9000)
  }

  func getData(p1: UInt8, p2: UInt8, data: [UInt8]) -> ([UInt8], UInt16) {
    guard p1 == 0x3F, p2 == 0xFF else { return ([], 0x6A86) }
    guard let t = parseTLV(data), t.count == 1, t[0].tag == 0x5C else { return ([], 0x6A80) }
    let tag = hexKey(t[0].value)
    if tag == "7e" {  // discovery object: PIV AID and PIN usage policy (PIV PIN only)
      return (tlv(0x7E, tlv(0x4F, Self.aid) + tlv(0x5F2F, [0x40, 0x00])), 0x9000)
    }
    if Self.pinProtectedObjects.contains(tag) && !pinVerified { return ([], 0x6982) }
    guard let value = state.objects[tag] else { return ([], 0x6A82) }
    return (tlv(0x53, Array(value)), 0x9000)
  }

  func putData(p1: UInt8, p2: UInt8, data: [UInt8]) -> ([UInt8], UInt16) {
    guard p1 == 0x3F, p2 == 0xFF else { return ([], 0x6A86) }
    guard managementAuthenticated else { return ([], 0x6982) }
    guard let t = parseTLV(data), t.count == 2, t[0].tag == 0x5C, t[1].tag == 0x53,
      (1...3).contains(t[0].value.count)
    else { return ([], 0x6A80) }
    guard t[1].value.count <= 3063 else { return ([], 0x6A84) }
    let tag = hexKey(t[0].value)
    state.objects[tag] = t[1].value.isEmpty ? nil : Data(t[1].value)
    changed()
    return ([], 0x9000)
  }

  func metadata(p2: UInt8) -> ([UInt8], UInt16) {
    switch p2 {
    case 0x80, 0x81:
      let isPIN = p2 == 0x80
      let body =
        tlv(0x01, [0xFF]) + tlv(0x05, [(isPIN ? state.pinIsDefault : state.pukIsDefault) ? 1 : 0])
        + tlv(
          0x06,
          [
            UInt8(isPIN ? state.pinMaxRetries : state.pukMaxRetries),
            UInt8(isPIN ? state.pinRetries : state.pukRetries),
          ])
      return (body, 0x9000)
    case 0x9B:
      return (
        tlv(0x01, [state.managementAlgorithm]) + tlv(0x02, [0x00, 0x01])
          + tlv(0x05, [state.managementKeyIsDefault ? 1 : 0]), 0x9000
      )
    default:
      guard Self.keySlots.contains(p2) else { return ([], 0x6A88) }
      guard let key = state.keys[hexKey([p2])] else {
        if profile.emptyMetadataWithoutAlgorithm { return (tlv(0x02, [0x00, 0x00]), 0x9000) }
        return ([], profile.emptySlotStatus ?? 0x6A82)
      }
      let point: Data
      do {
        point =
          key.algorithm == 0x11
          ? try P256.Signing.PrivateKey(rawRepresentation: key.privateKey).publicKey.x963Representation
          : try P384.Signing.PrivateKey(rawRepresentation: key.privateKey).publicKey.x963Representation
      } catch { return ([], 0x6F00) }
      return (
        tlv(0x01, [key.algorithm]) + tlv(0x02, [key.pinPolicy, key.touchPolicy])
          + tlv(0x03, [key.generated ? 1 : 2]) + tlv(0x04, tlv(0x86, Array(point))), 0x9000
      )
    }
  }

  /// Yubico SET MANAGEMENT KEY: 00 FF FF FF|FE, data alg ‖ 9B ‖ len ‖ key.
  func setManagementKey(p1: UInt8, p2: UInt8, data: [UInt8]) -> ([UInt8], UInt16) {
    guard p1 == 0xFF, p2 == 0xFF || p2 == 0xFE else { return ([], 0x6A86) }
    guard managementAuthenticated else { return ([], 0x6982) }
    guard data.count >= 3, data[1] == 0x9B, Int(data[2]) == data.count - 3 else { return ([], 0x6A80) }
    let lengths: [UInt8: Int] = [0x03: 24, 0x08: 16, 0x0A: 24, 0x0C: 32]
    guard let n = lengths[data[0]], n == data.count - 3 else { return ([], 0x6A80) }
    state.managementAlgorithm = data[0]
    state.managementKey = Array(data[3...])
    state.managementKeyIsDefault = state.managementKey == PIVCardState.defaultManagementKey
    changed()
    return ([], 0x9000)
  }

  func blockCipher(_ block: [UInt8], encrypt: Bool) -> [UInt8]? {
    guard let ctx = EVP_CIPHER_CTX_new() else { return nil }
    defer { EVP_CIPHER_CTX_free(ctx) }
    let cipher: OpaquePointer?
    switch state.managementAlgorithm {
    case 0x03: cipher = EVP_des_ede3_ecb()
    case 0x08: cipher = EVP_aes_128_ecb()
    case 0x0A: cipher = EVP_aes_192_ecb()
    case 0x0C: cipher = EVP_aes_256_ecb()
    default: return nil
    }
    guard EVP_CipherInit_ex(ctx, cipher, nil, state.managementKey, nil, encrypt ? 1 : 0) == 1 else { return nil }
    EVP_CIPHER_CTX_set_padding(ctx, 0)
    var out = [UInt8](repeating: 0, count: block.count + 16)
    var len: Int32 = 0
    guard EVP_CipherUpdate(ctx, &out, &len, block, Int32(block.count)) == 1 else { return nil }
    return Array(out.prefix(Int(len)))
  }
}

func randomBytes(_ n: Int) -> [UInt8] {
  var g = SystemRandomNumberGenerator()
  return (0..<n).map { _ in UInt8.random(in: 0...255, using: &g) }
}

/// A digest handed to the card as-is: the card signs what it is given and hashes nothing (SP 800-73-4 §3.2.4).
struct RawDigest: Digest {
  let bytes: [UInt8]
  init(_ b: [UInt8]) { bytes = b }
  func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try bytes.withUnsafeBytes(body)
  }
  func makeIterator() -> IndexingIterator<[UInt8]> { bytes.makeIterator() }
  var description: String { "RawDigest(\(bytes.count))" }
}
