import FoundationEssentials
import Glibc
import Testing
import TokenDevices
import UAFCore

@testable import TokenBridge

/// Metadata statements: both forms say what `AuthenticatorProfile` says, the v3 strings are the registry's for the 1.1
/// numbers, and the choices a statement adds (PIN rules, attestation roots) are the project's.
@Suite struct MetadataStatementTests {
  /// Two self-signed P-256 test roots (openssl req -x509, CN test-root-1 and test-root-2), PEM.
  static let twoRoots = """
    -----BEGIN CERTIFICATE-----
    MIIBgzCCASmgAwIBAgIULecYT0HUcwDFRulEKDFV+MjcD40wCgYIKoZIzj0EAwIw
    FjEUMBIGA1UEAwwLdGVzdC1yb290LTEwIBcNMjYxMTI4MjA1MTU3WhgPMjEyNjEx
    MDQyMDUxNTdaMBYxFDASBgNVBAMMC3Rlc3Qtcm9vdC0xMFkwEwYHKoZIzj0CAQYI
    KoZIzj0DAQcDQgAEfcjlxxQrGxXIOORdjE8boaalha0UowY1g2JY3cFL1QqZU5wu
    mXttzsOZ9yDQzOdAnpzbjPPSWjw9FJWpawh6dqNTMFEwHQYDVR0OBBYEFIpRLRDQ
    Hf7Fwq24WKWTzyxbCYp/MB8GA1UdIwQYMBaAFIpRLRDQHf7Fwq24WKWTzyxbCYp/
    MA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIhAOuujZDmm6LcUHb3
    9MYCtIunHYWL+xXcfUGYICeB1iBuAiBmPkSJebYlLrUFFOJZaPOny0zt/kFPRHNP
    ij4/oVDJCg==
    -----END CERTIFICATE-----
    -----BEGIN CERTIFICATE-----
    MIIBgzCCASmgAwIBAgIUSqamQwKHNELqp5xEu2ZHc8OCJ1kwCgYIKoZIzj0EAwIw
    FjEUMBIGA1UEAwwLdGVzdC1yb290LTIwIBcNMjYxMTI4MjA1MTU3WhgPMjEyNjEx
    MDQyMDUxNTdaMBYxFDASBgNVBAMMC3Rlc3Qtcm9vdC0yMFkwEwYHKoZIzj0CAQYI
    KoZIzj0DAQcDQgAEeEf/rvl5nVdLtUiTlLU+wGv3tu6DZmLU01JogxYn3FGFY0J/
    5lQijfSmqMjVTDUM4xwcosmEhva0+aDL4fkG8aNTMFEwHQYDVR0OBBYEFML6cCSj
    n60MaeZzeALWoVkCW1E8MB8GA1UdIwQYMBaAFML6cCSjn60MaeZzeALWoVkCW1E8
    MA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIgCvPkl2Cl4isIRIgE
    AN4jV6qbS4zoS0YZfxSQn4A3fpgCIQD3BNV6T47yQrK4lY+QJ+r5m4jWdhf2G0XE
    Wu19uTTy9g==
    -----END CERTIFICATE-----
    """

  static var basicFull: Configuration {
    var c = Configuration()
    #expect(throws: MetadataError.attestationRootUnused) {  // refused before the file is read
      try MetadataStatements.statements(.v3, configuration: c, attestationRootFile: "/nonexistent/root.pem")
    }
    c.attestationSlot = "9e"
    return c
  }

  @Test func everyTableMapsOneWayOnly() {
    let tables = [
      MetadataRegistry.userVerification, MetadataRegistry.keyProtection, MetadataRegistry.matcherProtection,
      MetadataRegistry.attachmentHint, MetadataRegistry.tcDisplay, MetadataRegistry.authenticationAlgorithm,
      MetadataRegistry.publicKeyAlgAndEncoding, MetadataRegistry.attestationType,
    ]
    for t in tables {
      #expect(Set(t.map(\.value)).count == t.count && Set(t.map(\.name)).count == t.count)
      for (value, name) in t {
        #expect(MetadataRegistry.value(name, in: t) == value && MetadataRegistry.name(value, in: t) == name)
      }
    }
    #expect(
      MetadataRegistry.names(UInt16(0x000A), in: MetadataRegistry.keyProtection) == ["hardware", "secure_element"])
    #expect(MetadataRegistry.names(UInt16(0), in: MetadataRegistry.tcDisplay) == [])
    #expect(MetadataRegistry.names(UInt16(0x0020), in: MetadataRegistry.tcDisplay) == nil)  // no such bit
    #expect(MetadataRegistry.name(UInt16(0x3E08), in: MetadataRegistry.attestationType) == "basic_surrogate")
  }

  /// The v3 strings, read back through the registry, are the 1.1 numbers: the two forms say the same.
  @Test func bothFormsAgree() throws {
    for kind in [TokenKind.piv, .fido2] {
      for config in [Configuration(), Self.basicFull] { try bothFormsAgree(kind, config) }
    }
  }

  func bothFormsAgree(_ kind: TokenKind, _ config: Configuration) throws {
    let m = AuthenticatorMetadata(
      kind, configuration: config, attestationRoots: AttestationRoots.parse(Array(Self.twoRoots.utf8)) ?? [])
    let (v3, old) = (try m.v3(), m.uaf11)
    typealias R = MetadataRegistry
    func bits(_ names: [String], _ t: R.Table) -> UInt32 {
      names.reduce(0) { $0 | (R.value($1, in: t) ?? 0x8000_0000) }
    }
    #expect(v3.aaid == old.aaid && v3.description == old.description && v3.upv == old.upv && v3.icon == old.icon)
    #expect(v3.authenticatorVersion == UInt32(old.authenticatorVersion))
    #expect(
      v3.authenticationAlgorithms.map { R.value($0, in: R.authenticationAlgorithm) } == [
        UInt32(old.authenticationAlgorithm)
      ])
    #expect(
      v3.publicKeyAlgAndEncodings.map { R.value($0, in: R.publicKeyAlgAndEncoding) } == [
        UInt32(old.publicKeyAlgAndEncoding)
      ])
    #expect(v3.attestationTypes.map { R.value($0, in: R.attestationType) } == old.attestationTypes.map { UInt32($0) })
    #expect(bits(v3.keyProtection, R.keyProtection) == UInt32(old.keyProtection))
    #expect(bits(v3.matcherProtection, R.matcherProtection) == UInt32(old.matcherProtection))
    #expect(bits(v3.attachmentHint, R.attachmentHint) == old.attachmentHint)
    #expect(bits(v3.tcDisplay, R.tcDisplay) == UInt32(old.tcDisplay))
    #expect(
      v3.userVerificationDetails.map { $0.map { R.value($0.userVerificationMethod, in: R.userVerification) } }
        == old.userVerificationDetails.map { $0.map { $0.userVerification } })
    #expect(v3.userVerificationDetails.map { $0.map(\.caDesc) } == old.userVerificationDetails.map { $0.map(\.caDesc) })
    #expect(v3.attestationRootCertificates == old.attestationRootCertificates)
    let full = kind == .piv && config.attestationSlot != nil
    #expect(old.attestationTypes == [full ? 0x3E07 : 0x3E08])
    #expect(old.attestationRootCertificates.count == (full ? 2 : 0))
  }

  /// The statement's facts are Discover's (the same `AuthenticatorDescription`), so the two cannot disagree.
  @Test func factsAreDiscoversFacts() {
    for kind in [TokenKind.piv, .fido2] {
      for config in [Configuration(), Self.basicFull] { factsAreDiscoversFacts(kind, config) }
    }
  }

  func factsAreDiscoversFacts(_ kind: TokenKind, _ config: Configuration) {
    let s = AuthenticatorMetadata(kind, configuration: config).uaf11
    let d = AuthenticatorProfile.discovered(kind, name: nil, configuration: config)
    #expect(s.aaid == d.aaid && s.description == d.description && s.assertionScheme == d.assertionScheme)
    #expect(s.authenticationAlgorithm == d.authenticationAlgorithm && s.attestationTypes == d.attestationTypes)
    #expect(s.keyProtection == d.keyProtection && s.matcherProtection == d.matcherProtection)
    #expect(s.attachmentHint == d.attachmentHint && s.tcDisplay == d.tcDisplay)
    #expect(s.tcDisplayContentType == d.tcDisplayContentType && s.isSecondFactorOnly == d.isSecondFactorOnly)
    #expect(s.icon == d.icon && s.upv == d.supportedUAFVersions)
    // Back to Discover's bits (UAF Protocol §3.1.11): the methods OR-ed, plus USER_VERIFY_ALL for one combination
    // of several.
    let details = s.userVerificationDetails
    let methods = details.flatMap { $0.map(\.userVerification) }.reduce(0, |)
    let all = details.count == 1 && details[0].count > 1 ? UAFConstant.userVerifyAll : 0
    #expect(methods | all == d.userVerification)
  }

  @Test func descriptionsAreShortASCII() {
    for kind in [TokenKind.piv, .fido2] {
      let d = AuthenticatorProfile.summary(kind)
      #expect(!d.isEmpty && d.count <= 200 && d.unicodeScalars.allSatisfy { $0.isASCII && $0.value >= 0x20 })
    }
  }

  @Test func pinRules() {
    let piv = AuthenticatorMetadata(.piv, configuration: Configuration()).uaf11.userVerificationDetails
    #expect(PinPolicy.pivPIN.digitsOnly)  // base 10 says digits
    #expect(
      piv == [[.init(userVerification: 4, caDesc: .init(base: 10, minLength: 6, maxRetries: 3, blockSlowdown: 0))]])
    let fido2 = AuthenticatorMetadata(.fido2, configuration: Configuration()).uaf11.userVerificationDetails
    #expect(
      fido2 == [
        [
          .init(userVerification: 4, caDesc: .init(base: 64, minLength: 4, maxRetries: 8, blockSlowdown: 0)),
          .init(userVerification: 1, caDesc: nil),
        ]
      ])
  }

  @Test func selection() throws {
    var c = Configuration()
    #expect(try MetadataStatements.select(configuration: c).map(\.facts.aaid) == ["7B1D#0001", "7B1D#0002"])
    #expect(try MetadataStatements.select(aaid: "7b1d#0002", configuration: c).map(\.kind) == [.fido2])
    #expect(throws: MetadataError.unknownAAID("7B1D#0003", known: ["7B1D#0001", "7B1D#0002"])) {
      try MetadataStatements.select(aaid: "7B1D#0003", configuration: c)
    }
    let roots = AttestationRoots.parse(Array(Self.twoRoots.utf8)) ?? []
    #expect(throws: MetadataError.attestationRootUnused) {
      try MetadataStatements.select(configuration: c, attestationRoots: roots)
    }
    c.attestationSlot = "9e"
    #expect(throws: MetadataError.attestationRootNeeded(slot: "9e")) { try MetadataStatements.select(configuration: c) }
    #expect(try MetadataStatements.select(aaid: "7B1D#0002", configuration: c).count == 1)  // FIDO2: no root needed
    let both = try MetadataStatements.select(configuration: c, attestationRoots: roots)
    #expect(both.map(\.attestationRootCertificates.count) == [2, 0])
    c.fido2AAID = "7b1d#0001"
    #expect(throws: MetadataError.sameAAID("7B1D#0001")) {
      try MetadataStatements.select(configuration: c, attestationRoots: roots)
    }
    #expect(ErrorReport(MetadataError.unknownAAID("x", known: ["a", "b"])).status == .usage)
  }

  @Test func attestationRootFiles() throws {
    let pem = Array(Self.twoRoots.utf8)
    let roots = try #require(AttestationRoots.parse(pem))
    #expect(roots.count == 2 && roots.allSatisfy { $0.count == 391 && $0.first == 0x30 })
    #expect(AttestationRoots.parse(roots[0]) == [roots[0]])  // DER
    #expect(AttestationRoots.parse(Array(roots[0].dropLast())) == nil)  // truncated DER
    #expect(AttestationRoots.parse(Array("not a certificate".utf8)) == nil)
    #expect(AttestationRoots.parse(Array("-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n".utf8)) == nil)
    let unterminated = Self.twoRoots.replacing("-----END CERTIFICATE-----\n-----BEGIN", with: "-----BEGIN")
    #expect(AttestationRoots.parse(Array(unterminated.utf8)) == nil)
    #expect(throws: MetadataError.input(.file(path: "/nonexistent/root.pem", errno: ENOENT))) {
      try AttestationRoots.read(path: "/nonexistent/root.pem")
    }
    #expect(throws: MetadataError.input(.notAFile(path: "/dev/null"))) { try AttestationRoots.read(path: "/dev/null") }
  }

  /// The JSON: the v3 form has exactly the keys MDS v3.0 names for it, the 1.1 form those of v1.1 §4.
  @Test func encodedKeys() throws {
    let m = AuthenticatorMetadata(.piv, configuration: Configuration())
    func keys(_ s: AnyMetadataStatement) throws -> Set<String> {
      let object = try JSONDecoder().decode([String: JSONValue].self, from: Data(JSONOutput.text(s).utf8))
      return Set(object.keys)
    }
    #expect(
      try keys(m.statement(.v3)).isSuperset(of: ["legalHeader", "schema", "authenticationAlgorithms", "cryptoStrength"])
    )
    let old = try keys(m.statement(.uaf11))
    #expect(old.isSuperset(of: ["assertionScheme", "authenticationAlgorithm", "isSecondFactorOnly"]))
    #expect(old.isDisjoint(with: ["legalHeader", "schema", "cryptoStrength", "authenticationAlgorithms"]))
  }
}
