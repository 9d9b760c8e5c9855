import UAFCore

/// TokenBridge's version, in one place: `tokenbridge --version`, the Debian package (a test compares its
/// changelog), DiscoveryData's `clientVersion` and the metadata statements' `authenticatorVersion` notes read it.
public enum TokenBridgeVersion {
  public static let string = "0.3.0"

  /// As the Client API's `Version` (major, minor) for DiscoveryData.clientVersion.
  public static var uaf: Version {
    let parts = string.split(separator: ".").map { Int($0) ?? 0 }
    return Version(major: parts.first ?? 0, minor: parts.count > 1 ? parts[1] : 0)
  }
}
