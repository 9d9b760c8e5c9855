import FoundationEssentials
import Platform
import TokenDevices
import UAFCore

/// What `fido2 info` shows: what `fido2-token -I` shows, in one value.
public struct FIDO2KeyReport: Codable, Sendable, Equatable {
  public var token: String
  public var name: String
  public var path: String?
  public var aaguid: String
  public var versions: [String]
  public var extensions: [String]
  public var options: [String: Bool]
  public var pinProtocols: [Int]
  public var minPINLength: Int
  public var forcePINChange: Bool
  /// PIN tries left (nil: no PIN set, or the key would not say).
  public var pinRetries: Int?
  /// In its cool-down: the key takes no PIN until it is re-inserted (`PINStatus.powerCycleRequired`).
  public var powerCycleRequired: Bool?
  /// Built-in UV (fingerprint) tries left, keys with UV only.
  public var uvRetries: Int?
  public var remainingDiscoverableCredentials: Int?
  public var firmwareVersion: UInt64?
  public var maxMsgSize: UInt64?
  public var supportsCredentialManagement: Bool
}

/// FIDO2 key maintenance: info, discoverable credentials (list, delete), and the guided reset.
public struct FIDO2Maintenance {
  public let localData: LocalData
  public let configuration: Configuration
  /// Bound of every wait for the user (typing, replugging).
  public var interactionTimeout: Double

  public init(environment: UAFEnvironment, interactionTimeout: Double) {
    localData = environment.localData
    configuration = environment.configuration
    self.interactionTimeout = interactionTimeout
  }

  public static func report(_ key: DiscoveredFIDO2) throws(OperationError) -> FIDO2KeyReport {
    let info: FIDO2Info
    do { info = try key.session.info() } catch { throw .token(error) }
    // Discovery read the tries a moment ago when a PIN is set (`key.info.pin`); ask again only for a key with PIN
    // support and no PIN, whose count discovery did not read.
    let status =
      info.pinIsSet && key.info.pin?.retriesLeft != nil
      ? key.info.pin : info.supportsPIN ? try? key.session.pinStatus() : nil
    return FIDO2KeyReport(
      token: key.info.id, name: key.info.name, path: key.info.reader, aaguid: info.aaguid, versions: info.versions,
      extensions: info.extensions, options: info.options, pinProtocols: info.pinProtocols,
      minPINLength: info.minPINLength, forcePINChange: info.forcePINChange, pinRetries: status?.retriesLeft,
      powerCycleRequired: status?.powerCycleRequired,
      uvRetries: key.session.uvRetries(info),
      remainingDiscoverableCredentials: info.remainingDiscoverableCredentials, firmwareVersion: info.firmwareVersion,
      maxMsgSize: info.maxMsgSize,
      supportsCredentialManagement: info.options["credMgmt"] == true || info.options["credentialMgmtPreview"] == true)
  }
}
