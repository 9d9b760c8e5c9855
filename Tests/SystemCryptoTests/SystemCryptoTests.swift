import Foundation
import SystemCrypto
import Testing

/// Known answers from the specifications' own test vectors and from pyca/cryptography (an implementation of its
/// own), and the refusals swift-crypto made that callers rely on.
@Suite struct SystemCryptoTests {
  static func hex(_ s: String) -> [UInt8] {
    var out: [UInt8] = []
    var i = s.startIndex
    while i < s.endIndex {
      let j = s.index(i, offsetBy: 2)
      out.append(UInt8(s[i..<j], radix: 16)!)
      i = j
    }
    return out
  }

  @Test func sha2MatchesFIPS180Examples() {
    #expect(
      Array(SHA256.hash(data: Array("abc".utf8)))
        == Self.hex("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"))
    var incremental = SHA256()
    incremental.update(data: Array("a".utf8))
    incremental.update(data: Array("bc".utf8))
    #expect(Array(incremental.finalize()) == Array(SHA256.hash(data: Array("abc".utf8))))
    #expect(
      Array(SHA384.hash(data: Array("abc".utf8)))
        == Self.hex(
          "cb00753f45a35e8bb5a03d699ac65007272c32ab0eded1631a8b605a43ff5bed8086072ba1e7cc2358baeca134c825a7"))
  }

  @Test func hmacMatchesRFC4231Case1() {
    let mac = HMAC<SHA256>.authenticationCode(
      for: Array("Hi There".utf8), using: SymmetricKey(data: [UInt8](repeating: 0x0B, count: 20)))
    #expect(Array(mac) == Self.hex("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"))
  }

  @Test func hkdfMatchesRFC5869Case1() {
    let okm = HKDF<SHA256>.deriveKey(
      inputKeyMaterial: SymmetricKey(data: [UInt8](repeating: 0x0B, count: 22)),
      salt: Self.hex("000102030405060708090a0b0c"),
      info: Self.hex("f0f1f2f3f4f5f6f7f8f9"), outputByteCount: 42)
    #expect(
      okm.withUnsafeBytes { Array($0) }
        == Self.hex("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"))
  }

  /// A UAF key derived from a FIDO2 key's hmac-secret output (HKDF, then the scalar's point) must stay what it
  /// was when the credential was registered: the scalar and point below are pyca/cryptography's.
  @Test func aDerivedScalarAndItsPointMatchAnIndependentImplementation() throws {
    let k = HKDF<SHA256>.deriveKey(
      inputKeyMaterial: SymmetricKey(data: Array(1...32) as [UInt8]), salt: Array(100...131) as [UInt8],
      info: Array("TokenBridge UAF P-256 key".utf8) + [0], outputByteCount: 32)
    let scalar = k.withUnsafeBytes { Array($0) }
    #expect(scalar == Self.hex("02a566dc2fd145b7c949bd1fc6e0f7f66fd5ced5aa258c7a6ed2b6670d598acd"))
    let key = try P256.Signing.PrivateKey(rawRepresentation: scalar)
    #expect(
      Array(key.publicKey.x963Representation)
        == Self.hex(
          "047c45114990465ac6aac9801258213dd532bd70a9a330b5448cef27d5234450054bf77a35ded1ec04e34e9e322dc5ac47bf4d6aaab619872822a5dcfcb49f67ac"
        ))
    #expect(Array(key.rawRepresentation) == scalar)
    #expect(
      key.publicKey.pemRepresentation == """
        -----BEGIN PUBLIC KEY-----
        MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEfEURSZBGWsaqyYASWCE91TK9cKmj
        MLVEjO8n1SNEUAVL93o13tHsBONOnjItxaxHv01qqrYZhygipdz8tJ9nrA==
        -----END PUBLIC KEY-----
        """)
    // pyca/cryptography's signature over "hello" verifies; our own round-trips through raw and DER.
    let theirs = try P256.Signing.ECDSASignature(
      derRepresentation: Self.hex(
        "3046022100d78e7d110669aa213348dbd8525a4039211c79e9effe97397ecbc4d78f91caf6022100b00b08243874394ba01fdeccf9d2b23d6e2468d0e65618201c2edefe4761c207"
      ))
    #expect(key.publicKey.isValidSignature(theirs, for: Array("hello".utf8)))
    #expect(!key.publicKey.isValidSignature(theirs, for: Array("hellO".utf8)))
    let ours = try key.signature(for: Array("hello".utf8))
    #expect(key.publicKey.isValidSignature(ours, for: SHA256.hash(data: Array("hello".utf8))))
    let again = try P256.Signing.ECDSASignature(rawRepresentation: ours.rawRepresentation)
    #expect(again.derRepresentation == ours.derRepresentation)
  }

  @Test func scalarsOutOfRangeAndPointsOffTheCurveAreRefused() {
    let n = Self.hex("ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551")
    #expect(throws: CryptoError.invalidKey) { try P256.Signing.PrivateKey(rawRepresentation: n) }
    #expect(throws: CryptoError.invalidKey) {
      try P256.Signing.PrivateKey(rawRepresentation: [UInt8](repeating: 0, count: 32))
    }
    #expect(throws: CryptoError.incorrectKeySize) {
      try P256.Signing.PrivateKey(rawRepresentation: [UInt8](repeating: 1, count: 31))
    }
    var off = Self.hex(
      "043ed113b7883b4c590638379db0c21cda16742ed0255048bf433391d374bc21d19099209accc4c8a224c843afa4f4c68a090d04da5e9889dae2f8eefce82a3740"
    )
    #expect((try? P256.KeyAgreement.PublicKey(x963Representation: off)) != nil)
    off[64] ^= 1
    #expect(throws: CryptoError.invalidKey) { try P256.KeyAgreement.PublicKey(x963Representation: off) }
    #expect(throws: CryptoError.incorrectParameterSize) {
      try P256.KeyAgreement.PublicKey(x963Representation: Array(off.prefix(33)))
    }
  }

  @Test func onlyTheOneDEREncodingOfASignatureIsTaken() throws {
    let der = Self.hex(
      "3046022100d78e7d110669aa213348dbd8525a4039211c79e9effe97397ecbc4d78f91caf6022100b00b08243874394ba01fdeccf9d2b23d6e2468d0e65618201c2edefe4761c207"
    )
    #expect((try? P256.Signing.ECDSASignature(derRepresentation: der)) != nil)
    #expect(throws: CryptoError.incorrectParameterSize) {
      try P256.Signing.ECDSASignature(derRepresentation: der + [0])
    }
    // r with a superfluous leading zero byte: valid BER, not DER.
    let padded = [0x30, 0x47, 0x02, 0x22, 0x00] + der[4..<38] + der[38...]
    #expect(throws: CryptoError.incorrectParameterSize) { try P256.Signing.ECDSASignature(derRepresentation: padded) }
    #expect(throws: CryptoError.incorrectParameterSize) { try P256.Signing.ECDSASignature(rawRepresentation: der) }
  }

  @Test func ecdhMatchesAnIndependentImplementation() throws {
    let a = try P256.KeyAgreement.PrivateKey(rawRepresentation: [UInt8](repeating: 0, count: 31) + [7])
    let b = try P256.KeyAgreement.PrivateKey(rawRepresentation: [UInt8](repeating: 0, count: 31) + [11])
    let z = try a.sharedSecretFromKeyAgreement(with: b.publicKey).withUnsafeBytes { Array($0) }
    #expect(z == Self.hex("5821b002dba277251a9d18eb72d5c720f4efe021b38029c017d871340893be7b"))
    #expect(try b.sharedSecretFromKeyAgreement(with: a.publicKey).withUnsafeBytes { Array($0) } == z)
  }

  @Test func p384KeysAndSignaturesOverADigest() throws {
    let key = try P384.Signing.PrivateKey(rawRepresentation: [UInt8](repeating: 0, count: 47) + [5])
    #expect(
      Array(key.publicKey.x963Representation)
        == Self.hex(
          "0411de24a2c251c777573cac5ea025e467f208e51dbff98fc54f6661cbe56583b037882f4a1ca297e60abcdbc3836d84bc8fa696c77440f92d0f5837e90a00e7c5284b447754d5dee88c986533b6901aeb3177686d0ae8fb33184414abe6c1713a"
        ))
    let digest = SHA384.hash(data: Array("hello".utf8))
    let signature = try key.signature(for: digest)
    #expect(key.publicKey.isValidSignature(signature, for: Array("hello".utf8)))
    let other = P384.Signing.PrivateKey()
    #expect(!other.publicKey.isValidSignature(signature, for: digest))
  }

  @Test func aesGCMMatchesAnIndependentImplementationAndRefusesATamperedBox() throws {
    let key = SymmetricKey(data: Array(0..<32) as [UInt8])
    let nonce = try AES.GCM.Nonce(data: Array(0..<12) as [UInt8])
    let box = try AES.GCM.seal(
      Array("attack at dawn".utf8), using: key, nonce: nonce, authenticating: Array("header".utf8))
    #expect(
      Array(box.ciphertext) + Array(box.tag) == Self.hex("2676a27aa68ee27af961f3eac68778dfa844b858372d1284003a558b797c")
    )
    #expect(try AES.GCM.open(box, using: key, authenticating: Array("header".utf8)) == Data("attack at dawn".utf8))
    #expect(throws: CryptoError.authenticationFailure) {
      try AES.GCM.open(box, using: key, authenticating: Array("Header".utf8))
    }
    var tag = Array(box.tag)
    tag[0] ^= 1
    let tampered = try AES.GCM.SealedBox(nonce: nonce, ciphertext: box.ciphertext, tag: tag)
    #expect(throws: CryptoError.authenticationFailure) {
      try AES.GCM.open(tampered, using: key, authenticating: Array("header".utf8))
    }
    #expect(throws: CryptoError.incorrectKeySize) {
      try AES.GCM.seal([1], using: SymmetricKey(data: [1, 2, 3]), authenticating: [UInt8]())
    }
  }

  @Test func generatedKeysAreDistinctAndSign() throws {
    let a = P256.Signing.PrivateKey()
    let b = P256.Signing.PrivateKey()
    #expect(a.rawRepresentation != b.rawRepresentation)
    let signature = try a.signature(for: Array("m".utf8))
    #expect(a.publicKey.isValidSignature(signature, for: Array("m".utf8)))
    #expect(!b.publicKey.isValidSignature(signature, for: Array("m".utf8)))
  }
}
