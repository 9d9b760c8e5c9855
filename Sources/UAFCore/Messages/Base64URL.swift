import Foundation

/// base64url without padding (RFC 4648 §5), as UAF uses it everywhere.
public enum Base64URL {
  public static func encode(_ bytes: [UInt8]) -> String {
    Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
      .replacingOccurrences(of: "=", with: "")
  }

  /// Decodes with or without padding; nil on any character outside the alphabet.
  public static func decode(_ s: String) -> [UInt8]? {
    var b = s.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
    guard !b.contains("="), b.count % 4 != 1 else {
      return s.hasSuffix("=") ? Data(base64Encoded: b).map { Array($0) } : nil
    }
    b += String(repeating: "=", count: (4 - b.count % 4) % 4)
    return Data(base64Encoded: b).map { Array($0) }
  }
}
