import FoundationEssentials

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// Which hosts count as "this machine" for the plain-http exception (tests, demo, a relying party on the same
/// machine). The host is parsed, never prefix-matched: only
/// - an IPv4 literal in 127.0.0.0/8 written as a strict dotted quad (`127.0.0.1`, `127.1.2.3`; not `127.1`,
///   `0x7f.0.0.1`, `0177.0.0.1`, `127.0.0.01` or `127.0.0.1.nip.io`, which resolvers may read differently),
/// - the IPv6 loopback `::1` (any spelling of that one address, bracketed or not; not `::ffff:127.0.0.1`),
/// - `localhost`, in any letter case. `localhost.` (trailing dot) is refused: it is a fully qualified name that
///   the resolver may send to DNS instead of answering from the hosts file, so nothing guarantees loopback.
public enum LoopbackHost {
  public static func isLoopback(_ host: String) -> Bool {
    if host.lowercased() == "localhost" { return true }
    var literal = Substring(host)
    if literal.hasPrefix("[") && literal.hasSuffix("]") { literal = literal.dropFirst().dropLast() }
    guard !literal.isEmpty, literal.allSatisfy({ $0.isASCII && ($0.isHexDigit || $0 == "." || $0 == ":") }) else {
      return false
    }
    if literal.contains(":") {
      var a6 = in6_addr()
      guard inet_pton(AF_INET6, String(literal), &a6) == 1 else { return false }
      return withUnsafeBytes(of: &a6) { Array($0) } == [UInt8](repeating: 0, count: 15) + [1]
    }
    // inet_pton takes exactly four decimal parts; leading zeros are refused below (some parsers read octal).
    let parts = literal.split(separator: ".", omittingEmptySubsequences: false)
    guard parts.count == 4, parts.allSatisfy({ $0.count == 1 || !$0.hasPrefix("0") }) else { return false }
    var a4 = in_addr()
    guard inet_pton(AF_INET, String(literal), &a4) == 1 else { return false }
    return withUnsafeBytes(of: &a4) { $0[0] } == 127
  }

  /// `http` URLs are allowed only on a loopback host; `https` everywhere.
  public static func isAllowed(_ url: URL) -> Bool {
    guard let scheme = url.scheme?.lowercased(), let host = url.host else { return false }
    return scheme == "https" || (scheme == "http" && isLoopback(host))
  }
}
