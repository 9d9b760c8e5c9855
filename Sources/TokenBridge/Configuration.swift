import Foundation

/// Settings from `$XDG_CONFIG_HOME/tokenbridge/config.json` (all optional; command-line options win).
public struct Configuration: Codable, Equatable, Sendable {
  /// Base URL of the nevisFIDO-compatible server (`https://host`; `http://` only for loopback).
  public var server: String?
  /// Our facet ID; default: the server's origin.
  public var facetID: String?
  /// AAID of PIV tokens (ours, registered in the server's metadata; never an F1D0 one).
  public var pivAAID: String
  /// AAID of FIDO2 keys.
  public var fido2AAID: String
  /// PIV slots registrations may use, in order (retired key-management slots by default).
  public var pivSlots: [String]
  /// Seconds a prompt waits for the user.
  public var interactionTimeout: Double
  /// Seconds an HTTP request may take.
  public var networkTimeout: Double
  /// A PIV slot holding an attestation key and its certificate (provisioned by the operator): registrations
  /// then carry basic full attestation signed by it. Nil: surrogate attestation (signed by the new key).
  public var attestationSlot: String?
  /// FIDO2 registrations make discoverable (resident) credentials; default false (no space used on the key).
  public var fido2ResidentKeys: Bool

  public static let defaultPIVAAID = "7B1D#0001"
  public static let defaultFIDO2AAID = "7B1D#0002"

  public init() {
    server = nil
    facetID = nil
    pivAAID = Self.defaultPIVAAID
    fido2AAID = Self.defaultFIDO2AAID
    pivSlots = (0x82...0x95).map { String($0, radix: 16) }
    interactionTimeout = 240
    networkTimeout = 60
    fido2ResidentKeys = false
  }

  enum CodingKeys: String, CodingKey {
    case server, facetID, pivAAID, fido2AAID, pivSlots, interactionTimeout, networkTimeout, attestationSlot
    case fido2ResidentKeys
  }

  public init(from decoder: Decoder) throws {
    self.init()
    let c = try decoder.container(keyedBy: CodingKeys.self)
    server = try c.decodeIfPresent(String.self, forKey: .server)
    facetID = try c.decodeIfPresent(String.self, forKey: .facetID)
    pivAAID = try c.decodeIfPresent(String.self, forKey: .pivAAID) ?? pivAAID
    fido2AAID = try c.decodeIfPresent(String.self, forKey: .fido2AAID) ?? fido2AAID
    pivSlots = try c.decodeIfPresent([String].self, forKey: .pivSlots) ?? pivSlots
    interactionTimeout = try c.decodeIfPresent(Double.self, forKey: .interactionTimeout) ?? interactionTimeout
    networkTimeout = try c.decodeIfPresent(Double.self, forKey: .networkTimeout) ?? networkTimeout
    attestationSlot = try c.decodeIfPresent(String.self, forKey: .attestationSlot)
    fido2ResidentKeys = try c.decodeIfPresent(Bool.self, forKey: .fido2ResidentKeys) ?? false
  }

  /// `$XDG_CONFIG_HOME/tokenbridge` (default `~/.config/tokenbridge`).
  public static var directory: URL {
    xdg("XDG_CONFIG_HOME", default: ".config").appendingPathComponent("tokenbridge")
  }

  /// `$XDG_DATA_HOME/tokenbridge` (default `~/.local/share/tokenbridge`).
  public static var dataDirectory: URL {
    xdg("XDG_DATA_HOME", default: ".local/share").appendingPathComponent("tokenbridge")
  }

  static func xdg(_ variable: String, default rel: String) -> URL {
    if let v = ProcessInfo.processInfo.environment[variable], v.hasPrefix("/") { return URL(fileURLWithPath: v) }
    return FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(rel)
  }

  /// Loads the config file; a missing file is the defaults, a broken one an error that names it.
  public static func load(_ url: URL = directory.appendingPathComponent("config.json")) throws(ConfigurationError)
    -> Configuration
  {
    guard FileManager.default.fileExists(atPath: url.path) else { return Configuration() }
    do {
      return try JSONDecoder().decode(Configuration.self, from: Data(contentsOf: url))
    } catch {
      throw .unreadable(path: url.path, reason: "\(error)")
    }
  }
}

public enum ConfigurationError: Error, Equatable, Sendable {
  case unreadable(path: String, reason: String)
  case noServer
  case insecureServer(String)
  case invalidServer(String)
}
