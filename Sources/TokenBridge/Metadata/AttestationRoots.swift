import FoundationEssentials
import Glibc
import Platform

/// The operator's attestation root certificate(s), from a file named on the command line: PEM (one or more
/// `CERTIFICATE` blocks, RFC 7468 §5) or one DER certificate. Only the outer DER shape is checked here (a
/// Certificate SEQUENCE holding a tbsCertificate SEQUENCE, RFC 5280 §4.1); the server checks the chain.
public enum AttestationRoots {
  /// Root certificates are small; a larger file is not one.
  public static let maxFileSize = 64 * 1024

  /// The DER certificates of the file at `path`.
  public static func read(path: String) throws(MetadataError) -> [[UInt8]] {
    let bytes: [UInt8]
    do throws(InputError) { bytes = try RegularFile.read(path, limit: maxFileSize) } catch { throw .input(error) }
    guard let certificates = parse(bytes) else { throw .notACertificate(path: path) }
    return certificates
  }

  /// The DER certificates in `bytes` (PEM or DER); nil when there is none, or when one is not a certificate.
  public static func parse(_ bytes: [UInt8]) -> [[UInt8]]? {
    let begin = "-----BEGIN CERTIFICATE-----"
    let end = "-----END CERTIFICATE-----"
    guard let text = String(validating: bytes, as: UTF8.self), text.contains("-----BEGIN ") else {
      return isCertificate(bytes) ? [bytes] : nil
    }
    var out: [[UInt8]] = []
    var rest = Substring(text)
    while let start = rest.firstRange(of: begin) {
      guard let stop = rest[start.upperBound...].firstRange(of: end) else { return nil }
      let body = rest[start.upperBound..<stop.lowerBound].filter { !$0.isWhitespace }
      guard let der = Data(base64Encoded: String(body)).map(Array.init), isCertificate(der) else { return nil }
      out.append(der)
      rest = rest[stop.upperBound...]
    }
    return out.isEmpty ? nil : out
  }

  /// A DER SEQUENCE filling `der` whose first element is a SEQUENCE (Certificate → tbsCertificate).
  static func isCertificate(_ der: [UInt8]) -> Bool {
    guard der.first == 0x30, let outer = header(der, at: 0), outer.start + outer.length == der.count,
      outer.start < der.count, der[outer.start] == 0x30, let inner = header(der, at: outer.start)
    else { return false }
    return inner.start + inner.length <= der.count
  }

  /// The content's start and length of the DER element at `i` (definite lengths of up to 4 bytes).
  static func header(_ der: [UInt8], at i: Int) -> (start: Int, length: Int)? {
    guard i + 1 < der.count else { return nil }
    let first = Int(der[i + 1])
    if first < 0x80 { return (i + 2, first) }
    let count = first & 0x7F
    guard (1...4).contains(count), i + 2 + count <= der.count else { return nil }
    let length = der[(i + 2)..<(i + 2 + count)].reduce(0) { $0 << 8 | Int($1) }
    return (i + 2 + count, length)
  }
}
