import SystemCrypto
import Foundation
import Testing
import UAFCore

/// The FIDO UAF conformance tool's sample messages (docs/UAF/Server/Conformance-Test-API.md of
/// fido-alliance/conformance-test-tools-resources): decoded byte-exact, rebuilt, hash relation checked.
@Suite struct ConformanceSampleTests {
  static let authFcParams =
    "eyJmYWNldElEIjoiaHR0cHM6Ly91YWYuZXhhbXBsZS5jb20vaW5kZXguaHRtbCIsImFwcElEIjoiaHR0cHM6Ly91YWYuZXhhbXBsZS5jb20vZmFjZXRzLmpzb24iLCJjaGFsbGVuZ2UiOiI0RDhlVXhkU3pRX1JiazdHZjBTb29LN1hyOU8yTFUtZzE1MHN0T3BLMGdvIiwiY2hhbm5lbEJpbmRpbmciOnt9fQ"
  static let authAssertion =
    "Aj7EAAQ-dgALLgkARkZGRiNGQzAzDi4FAAEAAQIADy4IAB4gsCir67EvCi4gAMYR1ZSqYuPLiNpYlomDJYGZZGQRGSlLlThqf8ZzF-k2EC4AAAkuIADaied-MDJnRRzcYvhXI4R1GAiTPuqiCrOYhNwQ8ui8_Q0uBAABAAAABi5GADBEAiDDt4-pzmEWZyakWcWGdtBQLIXSf75wL3tEjiCIry_QtQIgjw0oMlQqKOHdG2M26e1Z0bG4wGjfow_vu5zp-VkALFo"
  static let regFcParams =
    "eyJmYWNldElEIjoiaHR0cHM6Ly91YWYuZXhhbXBsZS5jb20vaW5kZXguaHRtbCIsImFwcElEIjoiaHR0cHM6Ly91YWYuZXhhbXBsZS5jb20vZmFjZXRzLmpzb24iLCJjaGFsbGVuZ2UiOiJZYjM5U2RVaFUyQjAwODlwUzVMN1ZCVzhhZmRscGxudlI0QjFBbmE1dms0IiwiY2hhbm5lbEJpbmRpbmciOnt9fQ"
  /// The published registration sample is cut ("...") after this prefix.
  static let regAssertionPrefix =
    "AT73AgM-sQALLgkARkZGRiNGQzAzDi4HAAEAAQIAAAEKLiAAbkZZjz4ysihP9vVgevgoH8SEV2JITkTxKFfsKbAiofQJLiAA2onnfjAyZ0Uc3GL4VyOEdRgIkz7q"

  @Test func authenticationAssertionDecodesAndRebuildsByteExact() throws {
    let bytes = try #require(Base64URL.decode(Self.authAssertion))
    let a = try AuthenticationAssertion(parsing: bytes)
    #expect(a.aaid == "FFFF#FC03")
    #expect(a.info == AssertionInfo(authenticatorVersion: 1, authenticationMode: 1, signatureAlgAndEncoding: 2))
    #expect(a.nonce.count == 8)
    #expect(a.transactionContentHash.isEmpty)
    #expect(a.keyID.count == 32)
    #expect(a.signCounter == 1)
    #expect(a.signature.first == 0x30)
    let sd = AuthenticationAssertion.signedData(
      aaid: a.aaid, info: a.info, nonce: a.nonce, finalChallengeHash: a.finalChallengeHash,
      transactionContentHash: a.transactionContentHash, keyID: a.keyID, signCounter: a.signCounter)
    #expect(sd == a.signedBytes)
    #expect(AuthenticationAssertion.assemble(signedData: sd, signature: a.signature) == bytes)
    #expect(Base64URL.encode(bytes) == Self.authAssertion)
  }

  @Test func finalChallengeHashIsSHA256OfTheFcParamsString() throws {
    let a = try AuthenticationAssertion(parsing: try #require(Base64URL.decode(Self.authAssertion)))
    #expect(a.finalChallengeHash == Array(SHA256.hash(data: Array(Self.authFcParams.utf8))))
    let fc = try #require(FinalChallengeParams.decode(Self.authFcParams))
    #expect(fc.appID == "https://uaf.example.com/facets.json")
    #expect(fc.facetID == "https://uaf.example.com/index.html")
  }

  @Test func truncatedRegistrationSampleIsRefusedWithATypedError() throws {
    let prefix = try #require(Base64URL.decode(Self.regAssertionPrefix))
    // Declared 0x02F7 bytes, far fewer present.
    do {
      _ = try RegistrationAssertion(parsing: prefix)
    } catch {
      guard case .truncatedValue(let tag, let declared, _) = error else {
        Issue.record("unexpected \(error)")
        return
      }
      #expect(tag == UAFTag.regAssertion && declared == 0x2F7)
    }
    // Its KRD header and leading fields are still readable: FINAL_CHALLENGE_HASH = SHA-256(fcParams).
    #expect(Array(prefix[4..<8]) == [0x03, 0x3E, 0xB1, 0x00])
    #expect(String(decoding: prefix[12..<21], as: UTF8.self) == "FFFF#FC03")
    // ASSERTION_INFO: version 1 (u16 LE: 01 00), mode 1, DER signature (02 00), raw key (00 01).
    #expect(Array(prefix[21..<32]) == [0x0E, 0x2E, 0x07, 0x00, 0x01, 0x00, 0x01, 0x02, 0x00, 0x00, 0x01])
    #expect(Array(prefix[32..<36]) == [0x0A, 0x2E, 0x20, 0x00])
    #expect(Array(prefix[36..<68]) == Array(SHA256.hash(data: Array(Self.regFcParams.utf8))))
  }

  @Test func registrationAssertionRoundTrip() throws {
    let key = P256.Signing.PrivateKey()
    let info = AssertionInfo(authenticationMode: 1, publicKeyAlgAndEncoding: UAFAlgorithm.eccX962Raw)
    let krd = RegistrationAssertion.keyRegistrationData(
      aaid: "7B1D#0001", info: info, finalChallengeHash: Array(repeating: 7, count: 32),
      keyID: Array(repeating: 1, count: 32), publicKey: Array(key.publicKey.x963Representation))
    let sig = Array(try key.signature(for: krd).derRepresentation)
    let a = try RegistrationAssertion(parsing: RegistrationAssertion.assemble(krd: krd, signature: sig))
    #expect(a.signedBytes == krd)
    #expect(a.attestationCertificates.isEmpty)
    let pub = try P256.Signing.PublicKey(x963Representation: a.publicKey)
    #expect(pub.isValidSignature(try P256.Signing.ECDSASignature(derRepresentation: a.signature), for: a.signedBytes))
  }
}

@Suite struct TLVErrorTests {
  @Test func everyMalformedInputIsATypedError() {
    #expect(throws: TLVError.truncatedHeader(offset: 0)) { try UAFTLV.parse([0x01, 0x3E, 0x00]) }
    #expect(throws: TLVError.truncatedValue(tag: 0x2E09, declared: 4, available: 2)) {
      try UAFTLV.parse([0x09, 0x2E, 0x04, 0x00, 1, 2])
    }
    #expect(throws: TLVError.tooLarge(70_000)) { try UAFTLV.parse([UInt8](repeating: 0, count: 70_000)) }
    var deep: [UInt8] = UAFTLV.encode(0x2E09, [1])
    for _ in 0..<10 { deep = UAFTLV.encode(0x3E04, deep) }
    #expect(throws: TLVError.tooDeep) { try UAFTLV.parse(deep) }
    #expect(throws: TLVError.unexpectedTag(0x3E01, expected: 0x3E02)) {
      try AuthenticationAssertion(parsing: UAFTLV.encode(0x3E01, []))
    }
    #expect(throws: TLVError.missing(tag: UAFTag.signedData, in: UAFTag.authAssertion)) {
      try AuthenticationAssertion(parsing: UAFTLV.encode(0x3E02, []))
    }
    #expect(throws: TLVError.truncatedHeader(offset: 4)) {
      try AuthenticationAssertion(parsing: UAFTLV.encode(0x3E02, []) + [0])  // trailing byte
    }
  }

  @Test func unknownTagsAreSkipped() throws {
    let bytes = try #require(Base64URL.decode(ConformanceSampleTests.authAssertion))
    let root = try UAFTLV.parseSingle(bytes, expecting: UAFTag.authAssertion)
    // Insert an unknown leaf inside SIGNED_DATA: parsing still finds every known field.
    let sd = try root.require(UAFTag.signedData)
    let extended = UAFTLV.encode(UAFTag.signedData, sd.value + UAFTLV.encode(0x2EFF, [9, 9]))
    let rebuilt = UAFTLV.encode(UAFTag.authAssertion, extended + UAFTLV.encode(UAFTag.signature, [0x30, 0]))
    let a = try AuthenticationAssertion(parsing: rebuilt)
    #expect(a.aaid == "FFFF#FC03" && a.signCounter == 1)
  }

  /// Mutations of the sample, from a fixed seed (a failure names its round and replays): each parses to a typed
  /// error or an assertion, the same one every time (the parser keeps no state). The coverage-guided fuzz target
  /// `uaf-tlv` (Tools/fuzz) explores far more; this one runs in every `swift test`.
  @Test func seededMutationsParseOrFailTheSameWayTwice() {
    var rng = ParserHardeningTests.SplitMix64(state: 0x5EED_0AF1)
    let sample = Base64URL.decode(ConformanceSampleTests.authAssertion)!
    for round in 0..<2000 {
      var b = sample
      for _ in 0..<Int.random(in: 1...6, using: &rng) {
        b[Int.random(in: 0..<b.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
      }
      if Bool.random(using: &rng) { b = Array(b.prefix(Int.random(in: 0..<b.count, using: &rng))) }
      let first = Result { try AuthenticationAssertion(parsing: b) }.map(\.aaid)
      let again = Result { try AuthenticationAssertion(parsing: b) }.map(\.aaid)
      #expect(String(describing: first) == String(describing: again), "round \(round)")
      _ = try? RegistrationAssertion(parsing: b)
    }
  }
}
