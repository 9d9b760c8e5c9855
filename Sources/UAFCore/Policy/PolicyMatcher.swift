/// Policy matching (UAF Protocol v1.1 §3.1.11-3.1.12, §3.2): which authenticators a request allows, and why the others not.
public enum PolicyMatcher {
  /// Reasons `criteria` does not match `authenticator`; empty when it matches. Every field present in the
  /// criteria must match (UAF Protocol v1.1 §3.1.11).
  public static func mismatches(_ c: MatchCriteria, _ a: AuthenticatorDescription) -> [String] {
    var why: [String] = []
    if let aaids = c.aaid, !aaids.contains(where: { $0.lowercased() == a.aaid.lowercased() }) {
      why.append("AAID \(a.aaid) is not among \(aaids.joined(separator: ", "))")
    }
    if let vendors = c.vendorID,
      !vendors.contains(where: { $0.lowercased() == a.aaid.prefix(4).lowercased() })
    {
      why.append("vendor \(a.aaid.prefix(4)) is not among \(vendors.joined(separator: ", "))")
    }
    if let keyIDs = c.keyIDs, !keyIDs.contains(where: a.keyIDs.contains) {
      why.append("none of the requested keys is registered with it")
    }
    if let uv = c.userVerification, !userVerificationMatches(uv, a.userVerification) {
      why.append(
        "user verification 0x\(String(uv, radix: 16)) is required, it offers 0x\(String(a.userVerification, radix: 16))"
      )
    }
    if let kp = c.keyProtection, kp & a.keyProtection == 0 {
      why.append("key protection 0x\(String(kp, radix: 16)) is required")
    }
    if let mp = c.matcherProtection, mp & a.matcherProtection == 0 {
      why.append("matcher protection 0x\(String(mp, radix: 16)) is required")
    }
    if let ah = c.attachmentHint, ah & a.attachmentHint == 0 {
      why.append("attachment 0x\(String(ah, radix: 16)) is required")
    }
    if let tc = c.tcDisplay, tc & a.tcDisplay == 0 {
      why.append("a transaction-confirmation display (0x\(String(tc, radix: 16))) is required")
    }
    if let algs = c.authenticationAlgorithms, !algs.contains(a.authenticationAlgorithm) {
      why.append("algorithm 0x\(String(a.authenticationAlgorithm, radix: 16)) is not accepted")
    }
    if let schemes = c.assertionSchemes, !schemes.contains(a.assertionScheme) {
      why.append("assertion scheme \(a.assertionScheme) is not accepted")
    }
    if let types = c.attestationTypes, !types.contains(where: a.attestationTypes.contains) {
      why.append("none of its attestation types is accepted")
    }
    if let v = c.authenticatorVersion, v > a.authenticatorVersion {
      why.append("version \(v) or later is required")
    }
    if let exts = c.exts, exts.contains(where: \.failIfUnknown) {
      why.append("an extension it does not know is required")
    }
    return why
  }

  /// User verification (UAF Protocol v1.1 §3.1.11, userVerification): equal values match; otherwise, when
  /// neither has USER_VERIFY_ALL, any shared method matches ("(AuthenticatorInfo.userVerification & mc) != 0").
  /// An authenticator that needs all its methods (ALL) matches only a criteria naming exactly them.
  static func userVerificationMatches(_ wanted: UInt32, _ offered: UInt32) -> Bool {
    if wanted == offered { return true }
    let all = UAFConstant.userVerifyAll
    return wanted & all == 0 && offered & all == 0 && wanted & offered != 0
  }

  /// The authenticators a policy accepts (in order), and for the others the reasons. An AND-group of more
  /// than one criterion needs several authenticators used together, which this client does not do: such a
  /// group is reported, never half-satisfied.
  public static func match(_ policy: Policy, _ authenticators: [AuthenticatorDescription]) -> (
    accepted: [AuthenticatorDescription], reasons: [String: [String]]
  ) {
    var accepted: [AuthenticatorDescription] = []
    var reasons: [String: [String]] = [:]
    // `accepted` is what the server accepts (UAF Protocol v1.1 §3.4.2): an empty list accepts nothing. The
    // client never widens the server's decision.
    if policy.accepted.isEmpty {
      for a in authenticators { reasons[a.aaid] = ["the server's policy accepts no authenticator (accepted is empty)"] }
      return ([], reasons)
    }
    for a in authenticators {
      if let bad = policy.disallowed?.first(where: { mismatches($0, a).isEmpty }) {
        reasons[a.aaid, default: []].append(
          "the policy disallows it (\(bad.aaid?.joined(separator: ",") ?? "criteria"))")
        continue
      }
      var ok = false
      for group in policy.accepted {
        if group.count != 1 {
          reasons[a.aaid, default: []].append("a combination of \(group.count) authenticators is asked for")
          continue
        }
        let why = mismatches(group[0], a)
        if why.isEmpty {
          ok = true
          break
        }
        reasons[a.aaid, default: []] += why
      }
      if ok {
        accepted.append(a)
        reasons[a.aaid] = nil
      }
    }
    return (accepted, reasons)
  }

  /// Why `policy` does not accept `authenticator` (never empty), or nil when it does.
  public static func refusal(_ policy: Policy, _ authenticator: AuthenticatorDescription) -> [String]? {
    let m = match(policy, [authenticator])
    guard m.accepted.isEmpty else { return nil }
    let why = m.reasons.values.flatMap { $0 }
    return why.isEmpty ? ["the server's policy does not accept it"] : why
  }
}
