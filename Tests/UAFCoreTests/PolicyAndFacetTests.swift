import Foundation
import Testing
import UAFCore

@Suite struct PolicyMatcherTests {
  let piv = AuthenticatorDescription(aaid: "7B1D#0001", description: "PIV", keyIDs: ["a2V5"])

  @Test func aaidAndCapabilities() {
    #expect(PolicyMatcher.mismatches(MatchCriteria(aaid: ["7b1d#0001"]), piv).isEmpty)
    #expect(!PolicyMatcher.mismatches(MatchCriteria(aaid: ["F1D0#0001"]), piv).isEmpty)
    #expect(PolicyMatcher.mismatches(MatchCriteria(userVerification: UAFConstant.userVerifyPasscode), piv).isEmpty)
    #expect(!PolicyMatcher.mismatches(MatchCriteria(userVerification: 0x2), piv).isEmpty)  // fingerprint
    var all = MatchCriteria(userVerification: UAFConstant.userVerifyAll | 0x4 | 0x1)
    #expect(!PolicyMatcher.mismatches(all, piv).isEmpty)  // presence AND passcode: it has passcode only
    // With USER_VERIFY_ALL on either side only the same value matches (UAF Protocol v1.1 §3.1.11).
    all.userVerification = UAFConstant.userVerifyAll | 0x4
    #expect(!PolicyMatcher.mismatches(all, piv).isEmpty)
    var kp = MatchCriteria()
    kp.keyProtection = 0x1  // software only
    #expect(!PolicyMatcher.mismatches(kp, piv).isEmpty)
    var tc = MatchCriteria()
    tc.tcDisplay = 0x8
    #expect(!PolicyMatcher.mismatches(tc, piv).isEmpty)
    #expect(PolicyMatcher.mismatches(MatchCriteria(keyIDs: ["a2V5"]), piv).isEmpty)
    #expect(!PolicyMatcher.mismatches(MatchCriteria(keyIDs: ["other"]), piv).isEmpty)
  }

  @Test func orOfAndGroupsAndDisallowed() {
    let other = AuthenticatorDescription(aaid: "7B1D#0002", description: "FIDO2")
    let p = Policy(accepted: [[MatchCriteria(aaid: ["F1D0#0001"])], [MatchCriteria(aaid: ["7B1D#0001"])]])
    let m = PolicyMatcher.match(p, [piv, other])
    #expect(m.accepted == [piv])
    #expect(m.reasons["7B1D#0002"]?.isEmpty == false)
    let d = Policy(accepted: [[MatchCriteria()]], disallowed: [MatchCriteria(aaid: ["7B1D#0001"])])
    #expect(PolicyMatcher.match(d, [piv, other]).accepted == [other])
    let both = Policy(accepted: [[MatchCriteria(aaid: ["7B1D#0001"]), MatchCriteria(aaid: ["7B1D#0002"])]])
    let r = PolicyMatcher.match(both, [piv, other])
    #expect(r.accepted.isEmpty)
    #expect(r.reasons["7B1D#0001"]?.first?.contains("combination") == true)
  }
}

@Suite struct FacetCheckTests {
  let me = "https://rp.example.com"
  func list(_ ids: [String], _ v: Version = .uaf11) -> TrustedFacetsList {
    TrustedFacetsList(trustedFacets: [.init(version: v, ids: ids)])
  }

  @Test func emptyAppIDIsOurFacet() throws {
    #expect(try FacetCheck.check(appID: nil, facetID: me, upv: .uaf11) { _ in throw URLError(.badURL) } == me)
  }

  @Test func listedFacetPasses() throws {
    let app = "https://rp.example.com/facets"
    #expect(try FacetCheck.check(appID: app, facetID: me, upv: .uaf11) { _ in list([me]) } == app)
  }

  @Test func unlistedOrOtherVersionOrForeignDomainFails() {
    let app = "https://rp.example.com/facets"
    #expect(throws: FacetCheckError.untrustedFacet(facetID: me, appID: app)) {
      try FacetCheck.check(appID: app, facetID: me, upv: .uaf11) { _ in list(["https://other.example.com"]) }
    }
    #expect(throws: FacetCheckError.untrustedFacet(facetID: me, appID: app)) {
      try FacetCheck.check(appID: app, facetID: me, upv: .uaf11) { _ in list([me], .uaf10) }
    }
    // An https facet under another registrable domain is discarded even if listed.
    let evil = "https://rp.evil.org"
    #expect(throws: FacetCheckError.untrustedFacet(facetID: evil, appID: app)) {
      try FacetCheck.check(appID: app, facetID: evil, upv: .uaf11) { _ in list([evil]) }
    }
    #expect(throws: FacetCheckError.invalidAppID("http://rp.example.com/facets")) {
      try FacetCheck.check(appID: "http://rp.example.com/facets", facetID: me, upv: .uaf11) { _ in list([me]) }
    }
    struct Unreachable: Error, CustomStringConvertible { var description: String { "no answer in time" } }
    #expect(throws: FacetCheckError.facetListUnavailable("no answer in time")) {
      try FacetCheck.check(appID: app, facetID: me, upv: .uaf11) { _ in throw Unreachable() }
    }
  }
}

@Suite struct TransactionContentTests {
  @Test func textIsDecodedAndSanitized() throws {
    let t = Transaction(contentType: "text/plain", content: Base64URL.encode(Array("Pay 10 CHF\u{1B}[2J to Bob".utf8)))
    let (text, bytes) = try TransactionContent.text(t)
    #expect(bytes == Array("Pay 10 CHF\u{1B}[2J to Bob".utf8))
    // Shown with its controls escaped: not interpreted and not dropped.
    #expect(TransactionContent.sanitized(text) == #"Pay 10 CHF\u{1B}[2J to Bob"#)
    #expect(
      TransactionContent.sanitized("a\u{1B}]0;title\u{07}b\u{9B}c\rd\n") == #"a\u{1B}]0;title\u{7}b\u{9B}c\u{D}d"#
        + "\n")
  }

  @Test func imagesAndBadContentAreRefused() {
    #expect(throws: TransactionContent.Problem.unsupportedType("image/png")) {
      try TransactionContent.text(Transaction(contentType: "image/png", content: "AAAA"))
    }
    #expect(throws: TransactionContent.Problem.notBase64URL) {
      try TransactionContent.text(Transaction(contentType: "text/plain", content: "@@@"))
    }
    #expect(throws: TransactionContent.Problem.notUTF8) {
      try TransactionContent.text(Transaction(contentType: "text/plain", content: Base64URL.encode([0xFF, 0xFE])))
    }
  }
}
