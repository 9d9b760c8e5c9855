import Foundation

/// What a virtual FIDO2 key keeps across power cycles and restarts (written atomically, mode 0600).
public struct FIDO2State: Codable, Equatable, Sendable {
  public struct Credential: Codable, Equatable, Sendable {
    public var id: Data
    public var rpIDHash: Data
    public var privateKey: Data
    public var credRandomWithUV: Data
    public var credRandomWithoutUV: Data
    public var userID: Data
    public var hmacSecret: Bool
    /// Discoverable (resident) credential; nil in states written before the option existed.
    public var resident: Bool?
    /// What makeCredential named (kept for credential management); nil in older states.
    public var rpID: String?
    public var rpName: String?
    public var userName: String?
    public var userDisplayName: String?
  }

  /// LEFT(SHA-256(PIN), 16); nil: no PIN set.
  public var pinHash: Data?
  public var pinRetries: Int
  public var minPINLength: Int
  public var forcePINChange: Bool
  public var signCount: UInt32
  public var aaguid: Data
  public var credentials: [Credential]

  public static let maxRetries = 8
  /// How many discoverable credentials the key holds at most (getInfo remainingDiscoverableCredentials).
  public static let maxResident = 25

  /// Discoverable credentials stored.
  public var residentCount: Int { credentials.filter { $0.resident == true }.count }

  public static func factory() -> FIDO2State {
    FIDO2State(
      pinHash: nil, pinRetries: maxRetries, minPINLength: 4, forcePINChange: false, signCount: 0,
      aaguid: Data(randomBytes(16)), credentials: [])
  }

  public static func load(_ url: URL) throws -> FIDO2State? {
    guard FileManager.default.fileExists(atPath: url.path) else { return nil }
    return try JSONDecoder().decode(FIDO2State.self, from: Data(contentsOf: url))
  }

  public func save(_ url: URL) throws {
    let tmp = url.appendingPathExtension("tmp")
    try JSONEncoder().encode(self).write(to: tmp)
    try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: tmp.path)
    guard rename(tmp.path, url.path) == 0 else {
      throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: url.path])
    }
  }
}

/// CTAP2 status codes used here (CTAP 2.1 §8.2).
enum CTAP2Status: UInt8 {
  case ok = 0x00
  case invalidCommand = 0x01
  case invalidParameter = 0x02
  case invalidLength = 0x03
  case cborUnexpectedType = 0x11
  case invalidCBOR = 0x12
  case missingParameter = 0x14
  case credentialExcluded = 0x19
  case keyStoreFull = 0x28
  case unsupportedAlgorithm = 0x26
  case operationDenied = 0x27
  case unsupportedOption = 0x2B
  case keepaliveCancel = 0x2D
  case noCredentials = 0x2E
  case userActionTimeout = 0x2F
  case notAllowed = 0x30
  case pinInvalid = 0x31
  case pinBlocked = 0x32
  case pinAuthInvalid = 0x33
  case pinAuthBlocked = 0x34
  case pinNotSet = 0x35
  case puatRequired = 0x36
  case pinPolicyViolation = 0x37
  case invalidSubcommand = 0x3E
  case unauthorizedPermission = 0x40
  case other = 0x7F
}

/// How the simulated user answers a touch request.
public enum UserPresence: String, Sendable, CaseIterable {
  case auto
  case deny
  case timeout
  /// Wait for a touch (`touchNow()`, SIGUSR2 in virtual-token), a CTAPHID_CANCEL, or 30 s.
  case wait
  /// As `wait`, but a CTAPHID_CANCEL is passed over (KEEPALIVE goes on): a key that misses the cancel.
  case waitIgnoringCancel = "wait-ignoring-cancel"
}
