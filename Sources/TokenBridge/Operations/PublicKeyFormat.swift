import SystemCrypto

/// Public-key encodings for output.
public enum PublicKeyFormat {
  /// PEM SubjectPublicKeyInfo of an uncompressed P-256 point.
  public static func pem(_ point: [UInt8]) throws(OperationError) -> String {
    do { return try P256.Signing.PublicKey(x963Representation: point).pemRepresentation } catch {
      throw .token(.malformedResponse(operation: "public key (not a P-256 point)"))
    }
  }
}
