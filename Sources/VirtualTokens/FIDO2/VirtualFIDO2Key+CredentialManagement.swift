import SystemCrypto
import Foundation

/// authenticatorCredentialManagement (CTAP 2.1 §6.8; 0x0A, and 0x41 as the FIDO_2_1_PRE preview command that
/// libfido2 1.12 sends): getCredsMetadata, enumerateRPs begin/next, enumerateCredentials begin/next,
/// deleteCredential. Every subcommand except the two "next" ones needs a pinUvAuthToken with the cm permission
/// (0x04); the "next" ones continue the enumeration begun last and fail with NOT_ALLOWED otherwise.
extension VirtualFIDO2Key.Processor {
  func credentialManagement(_ p: CBOR) -> Result<CBOR?, CTAP2Error> {
    guard let sub = p[int: 1]?.int else { return .failure(.init(.missingParameter)) }
    let params = p[int: 2]
    // A firmware that answers an empty success without discoverable credentials (solo1) does so for every
    // subcommand but getCredsMetadata, after the token check of those that have one.
    let emptyAnswer = profile.emptyCredentialManagementWhenNone && state.residentCount == 0 && sub != 0x01
    if emptyAnswer && [0x03, 0x05].contains(sub) { return .success(nil) }
    switch sub {
    case 0x03: return nextFromQueue(&rpQueue)
    case 0x05: return nextFromQueue(&credentialQueue)
    case 0x01, 0x02, 0x04, 0x06: break
    default: return .failure(.init(.invalidParameter))
    }
    // Any other subcommand ends an enumeration in progress.
    rpQueue = []
    credentialQueue = []
    // pinUvAuthParam = authenticate(token, subCommand ‖ subCommandParams) (params only where the subcommand has them).
    let message = [UInt8(sub)] + (sub == 0x04 || sub == 0x06 ? (params?.encoded() ?? []) : [])
    // The RP a subcommand is about: a token bound to an RP (permissions RP ID) may manage that RP's credentials.
    var about: Data?
    if sub == 0x04, let h = params?[int: 1]?.bytes { about = Data(h) }
    if sub == 0x06, let id = params?[int: 2]?[text: "id"]?.bytes {
      about = state.credentials.first { $0.id == Data(id) }?.rpIDHash
    }
    if case .failure(let e) = verifyManagementToken(p, message, rpIDHash: about) { return .failure(e) }
    if emptyAnswer { return .success(nil) }
    let resident = state.credentials.filter { $0.resident == true }
    switch sub {
    case 0x01:
      return .success(
        .map(
          (.int(1), .int(resident.count)),
          (.int(2), .int(FIDO2State.maxResident - state.residentCount))))
    case 0x02:
      var seen: [Data] = []
      var rps: [CBOR] = []
      for c in resident where !seen.contains(c.rpIDHash) {
        seen.append(c.rpIDHash)
        var rp: [(CBOR, CBOR)] = [(.text("id"), .text(c.rpID ?? ""))]
        if profile.rpNameIsUserName {
          rp.append((.text("name"), .text(c.userName ?? "")))
        } else if let n = c.rpName {
          rp.append((.text("name"), .text(n)))
        }
        rps.append(
          .map((.int(3), .map(rp.map { CBORPair(key: $0.0, value: $0.1) })), (.int(4), .bytes(Array(c.rpIDHash)))))
      }
      guard !rps.isEmpty else { return .failure(.init(.noCredentials)) }
      return firstOfQueue(rps, total: 5, into: &rpQueue)
    case 0x04:
      guard let hash = params?[int: 1]?.bytes, hash.count == 32 else { return .failure(.init(.missingParameter)) }
      let creds = resident.filter { $0.rpIDHash == Data(hash) }.map(describe)
      guard !creds.isEmpty else { return .failure(.init(.noCredentials)) }
      return firstOfQueue(creds, total: 9, into: &credentialQueue)
    default:  // 0x06 deleteCredential
      guard let id = params?[int: 2]?[text: "id"]?.bytes else { return .failure(.init(.missingParameter)) }
      guard let i = state.credentials.firstIndex(where: { $0.resident == true && $0.id == Data(id) }) else {
        return .failure(.init(.noCredentials))
      }
      state.credentials.remove(at: i)
      changed()
      return .success(nil)
    }
  }

  /// The token must carry cm; a token bound to an RP serves only subcommands about that RP (CTAP 2.1 §6.8:
  /// enumerateCredentials and deleteCredential; libfido2 asks for such a token).
  func verifyManagementToken(_ p: CBOR, _ message: [UInt8], rpIDHash: Data?) -> Result<Void, CTAP2Error> {
    guard let param = p[int: 4]?.bytes else { return .failure(.init(.puatRequired)) }
    guard let version = p[int: 3]?.int else { return .failure(.init(.missingParameter)) }
    guard version == 1 || version == 2 else { return .failure(.init(.invalidParameter)) }
    guard PinProtocol(version: version).verify(pinToken, message, param, isToken: true) else {
      return .failure(.init(.pinAuthInvalid))
    }
    guard tokenPermissions & 0x04 != 0 else { return .failure(.init(.pinAuthInvalid)) }
    if let bound = tokenRPID, Data(SHA256.hash(data: Array(bound.utf8))) != rpIDHash {
      return .failure(.init(.pinAuthInvalid))
    }
    return .success(())
  }

  /// One credential as enumerateCredentials returns it: user (6), credentialID (7), publicKey (8).
  func describe(_ c: FIDO2State.Credential) -> CBOR {
    var user: [(CBOR, CBOR)] = [(.text("id"), .bytes(Array(c.userID)))]
    if let n = c.userName { user.append((.text("name"), .text(n))) }
    if let d = c.userDisplayName { user.append((.text("displayName"), .text(d))) }
    let pub = (try? P256.Signing.PrivateKey(rawRepresentation: c.privateKey))?.publicKey.x963Representation
    return .map(
      (.int(6), .map(user.map { CBORPair(key: $0.0, value: $0.1) })),
      (.int(7), .map((.text("id"), .bytes(Array(c.id))), (.text("type"), .text("public-key")))),
      (.int(8), pub.map { coseKey($0, alg: -7) } ?? .null),
      (.int(10), .int(1)))  // credProtect: userVerificationOptional
  }

  /// The first item with its total (`totalKey`); the rest wait for the "next" subcommand.
  func firstOfQueue(_ items: [CBOR], total totalKey: Int, into queue: inout [CBOR]) -> Result<CBOR?, CTAP2Error> {
    queue = Array(items.dropFirst())
    guard var first = items.first?.pairs else { return .failure(.init(.noCredentials)) }
    first.append(CBORPair(key: .int(totalKey), value: .int(items.count)))
    return .success(.map(first))
  }

  func nextFromQueue(_ queue: inout [CBOR]) -> Result<CBOR?, CTAP2Error> {
    guard !queue.isEmpty else { return .failure(.init(.notAllowed)) }
    return .success(queue.removeFirst())
  }
}
