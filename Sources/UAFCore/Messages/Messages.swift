import FoundationEssentials

/// UAF protocol version (UAF Protocol §3.1.1). Ordered by major, then minor.
public struct Version: Codable, Equatable, Comparable, Sendable {
  public var major: Int
  public var minor: Int
  public init(major: Int, minor: Int) {
    self.major = major
    self.minor = minor
  }
  public static let uaf10 = Version(major: 1, minor: 0)
  public static let uaf11 = Version(major: 1, minor: 1)
  public static let supported = [uaf11, uaf10]

  public static func < (a: Version, b: Version) -> Bool { (a.major, a.minor) < (b.major, b.minor) }
}

public enum UAFOperation: String, Codable, Sendable {
  case reg = "Reg"
  case auth = "Auth"
  case dereg = "Dereg"
}

/// Extension (UAF Protocol v1.1 §3.1.10).
public struct Extension: Codable, Equatable, Sendable {
  public var id: String
  public var data: String
  public var failIfUnknown: Bool

  public init(id: String, data: String, failIfUnknown: Bool) {
    self.id = id
    self.data = data
    self.failIfUnknown = failIfUnknown
  }

  enum CodingKeys: String, CodingKey {
    case id, data
    case failIfUnknown = "fail_if_unknown"
  }
}

/// OperationHeader (UAF Protocol §3.1.3). `serverData` is echoed back unchanged.
public struct OperationHeader: Codable, Equatable, Sendable {
  public var upv: Version
  public var op: UAFOperation
  public var appID: String?
  public var serverData: String?
  public var exts: [Extension]?

  public init(upv: Version, op: UAFOperation, appID: String?, serverData: String?, exts: [Extension]? = nil) {
    self.upv = upv
    self.op = op
    self.appID = appID
    self.serverData = serverData
    self.exts = exts
  }
}

/// MatchCriteria (UAF Protocol §3.2.1).
public struct MatchCriteria: Codable, Equatable, Sendable {
  public var aaid: [String]?
  public var vendorID: [String]?
  public var keyIDs: [String]?
  public var userVerification: UInt32?
  public var keyProtection: UInt16?
  public var matcherProtection: UInt16?
  public var attachmentHint: UInt32?
  public var tcDisplay: UInt16?
  public var authenticationAlgorithms: [UInt16]?
  public var assertionSchemes: [String]?
  public var attestationTypes: [UInt16]?
  public var authenticatorVersion: UInt16?
  public var exts: [Extension]?

  public init(aaid: [String]? = nil, keyIDs: [String]? = nil, userVerification: UInt32? = nil) {
    self.aaid = aaid
    self.keyIDs = keyIDs
    self.userVerification = userVerification
  }
}

/// Policy (UAF Protocol §3.3): `accepted` is an OR of AND-groups; `disallowed` excludes.
public struct Policy: Codable, Equatable, Sendable {
  public var accepted: [[MatchCriteria]]
  public var disallowed: [MatchCriteria]?
  public init(accepted: [[MatchCriteria]], disallowed: [MatchCriteria]? = nil) {
    self.accepted = accepted
    self.disallowed = disallowed
  }
}

/// Transaction (UAF Protocol v1.1 §3.5.1): one rendering of the content to confirm.
public struct Transaction: Codable, Equatable, Sendable {
  public var contentType: String
  public var content: String
  /// One descriptor (not a list, unlike the registration assertion's): the image's characteristics.
  public var tcDisplayPNGCharacteristics: DisplayPNGCharacteristics?
  public init(contentType: String, content: String) {
    self.contentType = contentType
    self.content = content
  }
}

public struct DisplayPNGCharacteristics: Codable, Equatable, Sendable {
  public var width: UInt32
  public var height: UInt32
  public var bitDepth: UInt8
  public var colorType: UInt8
  public var compression: UInt8
  public var filter: UInt8
  public var interlace: UInt8
}

public struct RegistrationRequest: Codable, Equatable, Sendable {
  public var header: OperationHeader
  public var challenge: String
  public var username: String
  public var policy: Policy
}

public struct AuthenticationRequest: Codable, Equatable, Sendable {
  public var header: OperationHeader
  public var challenge: String
  public var transaction: [Transaction]?
  public var policy: Policy
}

/// One entry of a DeregistrationRequest (UAF Protocol v1.1 §3.6.1). Validated on decoding: `aaid` is empty
/// or an AAID, `keyID` is empty or a KeyID (base64url of 32–2048 bytes), and an empty `aaid` comes with an
/// empty `keyID`; UAF 1.0 allows no empty field. See `scope` for what the entry covers.
public struct DeregisterAuthenticator: Codable, Equatable, Sendable {
  public var aaid: String
  public var keyID: String
  public init(aaid: String, keyID: String) {
    self.aaid = aaid
    self.keyID = keyID
  }

  /// What a deregistration entry covers, always within the request's appID (UAF 1.1 "empty means all").
  public enum Scope: Equatable, Sendable {
    /// `aaid` and `keyID` empty: every registration of every authenticator for the appID.
    case allAuthenticators
    /// `keyID` empty: every key of this AAID for the appID.
    case allKeys(aaid: String)
    /// One key: (AAID, KeyID) identifies it (a KeyID is unique within its AAID only).
    case key(aaid: String, keyID: String)
  }

  public var scope: Scope {
    if aaid.isEmpty { return .allAuthenticators }
    return keyID.isEmpty ? .allKeys(aaid: aaid) : .key(aaid: aaid, keyID: keyID)
  }

  /// Whether this entry covers a registration of `aaid` (compared case-insensitively, AAIDs are hex) and
  /// `keyID` (compared exactly, base64url is case-sensitive). The caller checks the appID first.
  public func covers(aaid: String, keyID: String) -> Bool {
    switch scope {
    case .allAuthenticators: true
    case .allKeys(let a): a.lowercased() == aaid.lowercased()
    case .key(let a, let k): a.lowercased() == aaid.lowercased() && k == keyID
    }
  }
}

/// DeregistrationRequest (UAF Protocol v1.1 §3.6.1). Only registrations of `appID` may be touched: the
/// `authenticators` entries are read within it, never across appIDs.
public struct DeregistrationRequest: Codable, Equatable, Sendable {
  public var header: OperationHeader
  public var authenticators: [DeregisterAuthenticator]

  /// `header.appID`; nil or empty means the caller's facet ID (UAF Protocol §3.6, AppID and Facet §3.1.3):
  /// resolve it with `FacetCheck.check` like any other request before comparing with stored registrations.
  public var appID: String? { header.appID }
}

/// One request of a UAF protocol message (a JSON array of these).
public enum UAFRequest: Equatable, Sendable {
  case registration(RegistrationRequest)
  case authentication(AuthenticationRequest)
  case deregistration(DeregistrationRequest)

  public var header: OperationHeader {
    switch self {
    case .registration(let r): r.header
    case .authentication(let r): r.header
    case .deregistration(let r): r.header
    }
  }
}

public struct ChannelBinding: Codable, Equatable, Sendable {
  public var serverEndPoint: String?
  public var tlsServerCertificate: String?
  public var tlsUnique: String?
  public var cidPubkey: String?
  public init() {}

  enum CodingKeys: String, CodingKey {
    case serverEndPoint, tlsServerCertificate, tlsUnique
    case cidPubkey = "cid_pubkey"
  }
}

/// FinalChallengeParams (UAF Protocol §3.4.1); `fcParams` is its JSON, base64url.
public struct FinalChallengeParams: Codable, Equatable, Sendable {
  public var appID: String
  public var challenge: String
  public var facetID: String
  public var channelBinding: ChannelBinding

  public init(appID: String, challenge: String, facetID: String, channelBinding: ChannelBinding = ChannelBinding()) {
    self.appID = appID
    self.challenge = challenge
    self.facetID = facetID
    self.channelBinding = channelBinding
  }

  /// base64url(UTF-8 JSON). FINAL_CHALLENGE_HASH is SHA-256 over this string's ASCII bytes.
  public func encoded() -> String {
    let enc = JSONEncoder()
    enc.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    return Base64URL.encode(Array((try? enc.encode(self)) ?? Data()))
  }

  public static func decode(_ fcParams: String) -> FinalChallengeParams? {
    guard let bytes = Base64URL.decode(fcParams) else { return nil }
    return try? JSONDecoder().decode(FinalChallengeParams.self, from: Data(bytes))
  }
}

public struct AuthenticatorAssertion: Codable, Equatable, Sendable {
  public var assertionScheme: String
  public var assertion: String
  public var tcDisplayPNGCharacteristics: [DisplayPNGCharacteristics]?
  public var exts: [Extension]?
  public init(assertionScheme: String = "UAFV1TLV", assertion: String) {
    self.assertionScheme = assertionScheme
    self.assertion = assertion
  }
}

/// RegistrationResponse / AuthenticationResponse (UAF Protocol §3.4.6, §3.5.6): same shape.
public struct UAFResponse: Codable, Equatable, Sendable {
  public var header: OperationHeader
  public var fcParams: String
  public var assertions: [AuthenticatorAssertion]
  public init(header: OperationHeader, fcParams: String, assertions: [AuthenticatorAssertion]) {
    self.header = header
    self.fcParams = fcParams
    self.assertions = assertions
  }
}
