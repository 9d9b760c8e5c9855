import SystemCrypto
import Foundation
import Testing
import UAFCore

@testable import TokenBridge

/// QR images (zbar over libpng/libjpeg) and encrypted payloads (the JWE choice of PayloadEncryption.swift). The
/// round trips against independently made images and JWEs are in Tests/cli/test_oob_image_jwe.py (the RP makes
/// them with segno and python cryptography).
@Suite struct OutOfBandImageAndJWETests {
  @Test func concatKDFMatchesRFC7518AppendixC() {
    // RFC 7518 Appendix C: ECDH-ES, A128GCM, apu "Alice", apv "Bob".
    let z: [UInt8] = [
      158, 86, 217, 29, 129, 113, 53, 211, 114, 131, 66, 131, 191, 132, 38, 156, 251, 49, 110, 163, 218, 128, 106, 72,
      246, 218, 167, 121, 140, 254, 144, 196,
    ]
    let key = PayloadDecrypter.concatKDF(
      z: z, algorithmID: Array("A128GCM".utf8), apu: Array("Alice".utf8), apv: Array("Bob".utf8), bits: 128)
    #expect(Base64URL.encode(key) == "VqqN6vgjbSBcIijNcacQGg")
  }

  @Test func anEncryptedPayloadWithoutAKeyOrWithAnotherAlgorithmIsNotDecryptable() throws {
    let header = Base64URL.encode(Array(#"{"alg":"RSA-OAEP","enc":"A256GCM"}"#.utf8))
    let jwe =
      "\(header).\(Base64URL.encode([1, 2])).\(Base64URL.encode(Array(repeating: 0, count: 12))).AAAA.\(Base64URL.encode(Array(repeating: 0, count: 16)))"
    let payload: [String: Any] = ["nma_data": jwe, "nma_data_content_type": "application/jose"]
    let json = Array(try JSONSerialization.data(withJSONObject: payload))
    #expect(throws: OutOfBandError.decryptionError) { try OutOfBandPayload(json: json) }
    let decrypter = PayloadDecrypter { throw LocalDataError.notFound("no key") }
    #expect(throws: OutOfBandError.decryptionError) { try OutOfBandPayload(json: json, decrypter: decrypter) }
    #expect(
      throws: OutOfBandError.malformedPayload(
        reason: "the encrypted nma_data is not a compact JWE (five parts separated by dots)")
    ) { try decrypter.decrypt("a.b.c") }
    let notAString: [String: Any] = ["nma_data": ["token": "t"], "nma_data_content_type": "application/jose"]
    #expect(
      throws: OutOfBandError.malformedPayload(reason: "an application/jose nma_data must be a compact JWE string")
    ) { try OutOfBandPayload(json: Array(try JSONSerialization.data(withJSONObject: notAString))) }
  }

  @Test func imagesThatAreNotOrHoldNoQRCodeAreNamed() {
    #expect(throws: OutOfBandError.qrImage(.notAnImage)) { try QRImage.text(in: Array("hello".utf8)) }
    #expect(throws: OutOfBandError.qrImage(.notAnImage)) { try QRImage.text(in: []) }
    // A PNG signature and nothing else; a JPEG start-of-image and nothing else.
    #expect(throws: OutOfBandError.qrImage(.unreadableImage)) {
      try QRImage.text(in: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13])
    }
    #expect(throws: OutOfBandError.qrImage(.unreadableImage)) { try QRImage.text(in: [0xFF, 0xD8, 0xFF, 0xE0, 0, 16]) }
  }

  /// A PNG that is only its signature, an IHDR chunk for `width` x `height` 8-bit gray pixels and an empty IDAT
  /// (libpng reads the header up to the first IDAT).
  func pngHeader(width: UInt32, height: UInt32) -> [UInt8] {
    func be(_ v: UInt32) -> [UInt8] {
      [UInt8(v >> 24 & 0xFF), UInt8(v >> 16 & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)]
    }
    func crc32(_ bytes: [UInt8]) -> UInt32 {
      var c: UInt32 = 0xFFFF_FFFF
      for b in bytes {
        c ^= UInt32(b)
        for _ in 0..<8 { c = c & 1 == 1 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
      }
      return ~c
    }
    let ihdr = Array("IHDR".utf8) + be(width) + be(height) + [8, 0, 0, 0, 0]
    let idat = Array("IDAT".utf8)
    return [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + be(13) + ihdr + be(crc32(ihdr)) + be(0) + idat
      + be(crc32(idat))
  }

  @Test func anImageOfTooManyPixelsIsRefusedBeforeItIsDecoded() {
    #expect(throws: OutOfBandError.qrImage(.tooLarge)) {
      try QRImage.text(in: pngHeader(width: 10_000, height: 10_000))
    }
    // Within the limit, the same header without image data is a damaged image.
    #expect(throws: OutOfBandError.qrImage(.unreadableImage)) {
      try QRImage.text(in: pngHeader(width: 100, height: 100))
    }
  }

  @Test func aScannedLinkIsALinkAndAnythingElseIsQRText() {
    #expect(
      OutOfBandSource.scanned(" https://a.example/o?dispatchTokenResponse=x\n")
        == .link("https://a.example/o?dispatchTokenResponse=x"))
    #expect(OutOfBandSource.scanned("eyJubWEiOjF9") == .qrText("eyJubWEiOjF9"))
  }

  @Test func theDesktopEntryQuotesItsProgram() throws {
    #expect(DesktopHandler.execQuoted("/usr/bin/tokenbridge") == "/usr/bin/tokenbridge")
    #expect(DesktopHandler.execQuoted("/opt/my tools/tb") == #""/opt/my tools/tb""#)
    #expect(DesktopHandler.execQuoted(#"/opt/a$b"c\d%e"#) == #""/opt/a\\$b\\"c\\\\d%%e""#)
    let entry = try DesktopHandler(executable: "/usr/bin/tokenbridge").entry()
    #expect(entry.contains("\nExec=/usr/bin/tokenbridge oob %u\n") && entry.contains("\nTerminal=true\n"))
    #expect(entry.contains("\nMimeType=x-scheme-handler/tokenbridge;\n"))
    #expect(throws: OperationError.input(.file(path: "tokenbridge", errno: EINVAL))) {
      try DesktopHandler(executable: "tokenbridge").entry()
    }
  }

  /// A JWE of this profile for `recipient`, its header `extra` fields added (the content key from empty
  /// PartyUInfo/PartyVInfo, as if `apu`/`apv` were absent).
  func jwe(for recipient: P256.KeyAgreement.PublicKey, header extra: String) throws -> String {
    let ephemeral = P256.KeyAgreement.PrivateKey()
    let raw = Array(ephemeral.publicKey.x963Representation)
    let epk =
      #"{"kty":"EC","crv":"P-256","x":"\#(Base64URL.encode(Array(raw[1..<33])))","y":"\#(Base64URL.encode(Array(raw[33...])))"}"#
    let header = Base64URL.encode(Array(#"{"alg":"ECDH-ES","enc":"A256GCM","epk":\#(epk)\#(extra)}"#.utf8))
    let z = try ephemeral.sharedSecretFromKeyAgreement(with: recipient).withUnsafeBytes { [UInt8]($0) }
    let key = PayloadDecrypter.concatKDF(z: z, algorithmID: Array("A256GCM".utf8), apu: [], apv: [], bits: 256)
    let box = try AES.GCM.seal(
      Array(#"{"token":"t"}"#.utf8), using: SymmetricKey(data: key), authenticating: Array(header.utf8))
    return [
      header, "", Base64URL.encode(Array(box.nonce)), Base64URL.encode(Array(box.ciphertext)),
      Base64URL.encode(Array(box.tag)),
    ].joined(separator: ".")
  }

  @Test func aMalformedJWEIsMalformedNotForAnotherKey() throws {
    let own = P256.KeyAgreement.PrivateKey()
    let decrypter = PayloadDecrypter { own }
    #expect(try decrypter.decrypt(jwe(for: own.publicKey, header: "")) == Array(#"{"token":"t"}"#.utf8))
    // apu/apv must be base64url strings: not read as absent (the sender may have used them).
    for (extra, name) in [(#","apu":"!!!""#, "apu"), (#","apu":7"#, "apu"), (#","apv":"a b""#, "apv")] {
      #expect(
        throws: OutOfBandError.malformedPayload(
          reason: "the encrypted nma_data has an \(name) that is not a base64url string")
      ) { try decrypter.decrypt(jwe(for: own.publicKey, header: extra)) }
    }
    let good = try jwe(for: own.publicKey, header: "").split(separator: ".", omittingEmptySubsequences: false)
    for bad in [
      "", "....", good.prefix(4).joined(separator: "."), good.joined(separator: ".") + ".",
      (["e30!"] + good.dropFirst()).joined(separator: "."),
      ([good[0], good[1], "@@", good[3], good[4]]).joined(separator: "."),
    ] {
      #expect {
        try decrypter.decrypt(bad)
      } throws: { error in
        guard case .malformedPayload = error as? OutOfBandError else { return false }
        return true
      }
    }
    // Well-formed, for another key: that is what decryptionError says.
    let other = P256.KeyAgreement.PrivateKey()
    #expect(throws: OutOfBandError.decryptionError) { try decrypter.decrypt(jwe(for: other.publicKey, header: "")) }
  }

  @Test func aQRImagePathMustBeARegularFile() throws {
    #expect(throws: OperationError.outOfBand(.qrImage(.notAFile))) { try QRImage.text(file: "/dev/null") }
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tb-fifo-\(getpid())")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: dir) }
    let fifo = dir.appendingPathComponent("qr.png").path
    #expect(mkfifo(fifo, 0o600) == 0)
    // No writer: a blocking open would wait forever.
    #expect(throws: OperationError.outOfBand(.qrImage(.notAFile))) { try QRImage.text(file: fifo) }
    #expect(throws: OperationError.input(.file(path: dir.path, errno: EISDIR))) { try QRImage.text(file: dir.path) }
  }
}
