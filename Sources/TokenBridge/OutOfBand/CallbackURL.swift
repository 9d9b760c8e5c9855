#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Which x-callback targets may be opened: custom schemes and https origins on the configured allow-list.
public struct CallbackPolicy: Sendable {
  public var allowed: [String]
  public init(allowed: [String]) { self.allowed = allowed }

  /// True when `target` may be opened (`opened(_:)` is not nil).
  public func allows(_ target: String) -> Bool { opened(target) != nil }

  /// The string to hand to xdg-open when `target` is on the list (its scheme, `myapp:`, or its https origin,
  /// `https://bank.example`), else nil. It is `CallbackURL`'s serialization of the target, the very string the
  /// decision was made on, not the target as given.
  public func opened(_ target: String) -> String? {
    guard let url = CallbackURL(target) else { return nil }
    return allowed.contains { CallbackURL.allowListEntry($0) == url.origin } ? url.serialized : nil
  }
}

/// The one URL rule for x-callback targets and `callbackAllowList` entries. The browser that xdg-open starts parses
/// a target by the WHATWG URL Standard, which differs from Foundation's RFC 3986 parser: it drops tabs and
/// newlines and leading/trailing spaces and controls, reads `\` as `/` in https URLs (so
/// `https://evil.example\@bank.example/` is evil.example to a browser, bank.example with userinfo to Foundation),
/// skips any number of slashes after `https:`, percent-decodes and IDNA-maps the host, and reads hosts ending in a
/// number as IPv4 addresses (`0x7f.1`). So no general URL parser decides here. A target is refused unless
///
/// - it is printable ASCII without spaces or backslashes (no tab, newline, control, non-ASCII character), at most
///   4096 bytes, with a scheme (a letter, then letters, digits, `+`, `-`, `.`);
/// - https: exactly `https://` then the authority up to the first `/`, `?` or `#`, which holds no userinfo (`@`);
///   the host is letters, digits, `-`, `.` and `_` (no percent-encoding), read as WHATWG's host parser reads such
///   a host (ASCII lowercase; a host whose last label is a number is an IPv4 address in decimal, octal or hex parts,
///   written back dotted-decimal), or an IPv6 literal `[…]` (written back in WHATWG's compressed form); the port,
///   if any, decimal up to 65535 (443, the default, dropped);
/// - another scheme: not one a browser treats specially or that runs code or reads files (`http`, `file`,
///   `javascript`, `data`, `blob`, `vbscript`, `ftp`, `ws`, `wss`, `about`, `filesystem`), nor `tokenbridge` (a
///   callback must not start another out-of-band operation); only the scheme counts (`myapp:`).
///
/// A plain `https://host[:port]/path?query#fragment` is never refused. The serialization handed to xdg-open is
/// the lowercase scheme, the host as read above, the port, then the path, query and fragment as given (printable
/// ASCII without backslashes, so a browser reads the same origin in it).
public struct CallbackURL: Sendable, Equatable {
  /// `https://host[:port]` or `scheme:`.
  public var origin: String
  /// What is opened.
  public var serialized: String

  static let refusedSchemes: Set<String> = [
    "http", "file", "javascript", "data", "blob", "vbscript", "ftp", "ws", "wss", "about", "filesystem",
    "tokenbridge",
  ]

  public init?(_ target: String) {
    let b = Array(target.utf8)
    guard !b.isEmpty, b.count <= 4096, b.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\\") }),
      let colon = b.firstIndex(of: UInt8(ascii: ":")), colon > 0, Self.isLetter(b[0]),
      b[1..<colon].allSatisfy({ Self.isLetter($0) || Self.isDigit($0) || "+-.".utf8.contains($0) })
    else { return nil }
    let scheme = Self.lower(b[..<colon])
    let rest = b[(colon + 1)...]
    guard scheme == "https" else {
      guard !Self.refusedSchemes.contains(scheme) else { return nil }
      origin = scheme + ":"
      serialized = scheme + ":" + String(decoding: rest, as: UTF8.self)
      return
    }
    guard rest.starts(with: "//".utf8) else { return nil }
    let authorityAndTail = rest.dropFirst(2)
    let end = authorityAndTail.firstIndex { "/?#".utf8.contains($0) } ?? authorityAndTail.endIndex
    let authority = authorityAndTail[..<end]
    var tail = String(decoding: authorityAndTail[end...], as: UTF8.self)
    if !tail.hasPrefix("/") { tail = "/" + tail }  // a browser's serialization of an empty https path
    guard !authority.isEmpty, !authority.contains(UInt8(ascii: "@")) else { return nil }
    let hostPart: ArraySlice<UInt8>
    let portPart: ArraySlice<UInt8>?
    if authority.first == UInt8(ascii: "[") {
      guard let close = authority.firstIndex(of: UInt8(ascii: "]")) else { return nil }
      hostPart = authority[...close]
      let after = authority[(close + 1)...]
      if after.isEmpty {
        portPart = nil
      } else {
        guard after.first == UInt8(ascii: ":") else { return nil }
        portPart = after.dropFirst()
      }
    } else if let c = authority.firstIndex(of: UInt8(ascii: ":")) {
      hostPart = authority[..<c]
      portPart = authority[(c + 1)...]
    } else {
      hostPart = authority
      portPart = nil
    }
    guard let host = Self.host(hostPart) else { return nil }
    var port: Int?
    if let portPart, !portPart.isEmpty {
      guard portPart.allSatisfy(Self.isDigit) else { return nil }
      var n = 0
      for d in portPart {
        n = n * 10 + Int(d - UInt8(ascii: "0"))
        guard n <= 65535 else { return nil }
      }
      port = n == 443 ? nil : n
    }
    origin = "https://" + host + (port.map { ":\($0)" } ?? "")
    serialized = origin + tail
  }

  /// The origin an allow-list entry names (`myapp:`, or an https origin with at most a `/` path), else nil.
  public static func allowListEntry(_ entry: String) -> String? {
    if entry.hasSuffix(":"), !entry.contains("/" as Character) {
      guard let url = CallbackURL(entry), url.origin != "https:" else { return nil }
      return url.origin
    }
    guard let url = CallbackURL(entry), url.origin.hasPrefix("https://"), url.serialized == url.origin + "/" else {
      return nil
    }
    return url.origin
  }

  static func isLetter(_ c: UInt8) -> Bool { (c | 0x20) >= UInt8(ascii: "a") && (c | 0x20) <= UInt8(ascii: "z") }
  static func isDigit(_ c: UInt8) -> Bool { c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9") }
  static func lower<S: Sequence<UInt8>>(_ s: S) -> String {
    String(decoding: s.map { isLetter($0) ? $0 | 0x20 : $0 }, as: UTF8.self)
  }

  /// The host as a WHATWG parser reads it, for the hosts this rule accepts; nil for any other.
  static func host(_ raw: ArraySlice<UInt8>) -> String? {
    if raw.first == UInt8(ascii: "[") {
      guard raw.count > 2, raw.last == UInt8(ascii: "]") else { return nil }
      return ipv6(String(decoding: raw.dropFirst().dropLast(), as: UTF8.self))
    }
    guard !raw.isEmpty, raw.allSatisfy({ isLetter($0) || isDigit($0) || "-._".utf8.contains($0) }) else {
      return nil
    }
    let host = lower(raw)
    var labels = host.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
    if labels.count > 1, labels.last == "" { labels.removeLast() }
    guard let last = labels.last else { return nil }
    let endsInNumber =
      (!last.isEmpty && last.utf8.allSatisfy(isDigit))
      || (last.hasPrefix("0x") && last.dropFirst(2).allSatisfy(\.isHexDigit))
    return endsInNumber ? ipv4(labels) : host
  }

  /// WHATWG's IPv4 parser (parts in decimal, `0`-prefixed octal or `0x` hex; the last part fills the remaining
  /// bytes), written back dotted-decimal; nil where a browser fails.
  static func ipv4(_ parts: [String]) -> String? {
    guard parts.count <= 4 else { return nil }
    var numbers: [UInt64] = []
    for p in parts {
      guard !p.isEmpty else { return nil }
      var digits = Substring(p)
      var radix: UInt64 = 10
      if p.hasPrefix("0x") {
        radix = 16
        digits = digits.dropFirst(2)
      } else if p.count > 1, p.hasPrefix("0") {
        radix = 8
        digits = digits.dropFirst()
      }
      var n: UInt64 = 0
      for c in digits {
        guard let d = c.hexDigitValue, UInt64(d) < radix else { return nil }
        n = n * radix + UInt64(d)
        if n > UInt64(UInt32.max) { return nil }
      }
      numbers.append(n)
    }
    guard numbers.dropLast().allSatisfy({ $0 <= 255 }),
      numbers.last! < (UInt64(1) << (8 * UInt64(5 - numbers.count)))
    else { return nil }
    var address = numbers.last!
    for (i, n) in numbers.dropLast().enumerated() { address += n << (8 * UInt64(3 - i)) }
    return (0..<4).map { String((address >> (8 * UInt64(3 - $0))) & 0xFF) }.joined(separator: ".")
  }

  /// An IPv6 literal (inet_pton's reading) written back as WHATWG serializes it: `[` lowercase hex pieces, the
  /// first longest run of two or more zero pieces as `::` `]`.
  static func ipv6(_ text: String) -> String? {
    var a = in6_addr()
    guard text.utf8.allSatisfy({ isDigit($0) || isLetter($0) || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: ".") }),
      inet_pton(AF_INET6, text, &a) == 1
    else { return nil }
    let bytes = withUnsafeBytes(of: a) { Array($0) }
    let pieces = (0..<8).map { UInt16(bytes[2 * $0]) << 8 | UInt16(bytes[2 * $0 + 1]) }
    var best = (start: -1, length: 1)
    var i = 0
    while i < 8 {
      var j = i
      while j < 8, pieces[j] == 0 { j += 1 }
      if j - i > best.length { best = (i, j - i) }
      i = j == i ? i + 1 : j
    }
    var out = "["
    var k = 0
    while k < 8 {
      if k == best.start {
        out += k == 0 ? "::" : ":"
        k += best.length
        continue
      }
      out += String(pieces[k], radix: 16)
      if k < 7 { out += ":" }
      k += 1
    }
    return out + "]"
  }
}
