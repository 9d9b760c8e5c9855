import TokenDevices
import UAFCore

/// An authenticator known from an earlier listing (a token another operation holds now): it describes itself as
/// the token did, for checkPolicy, and does nothing on the token.
struct KnownAuthenticator: TokenAuthenticator {
  let tokenInfo: TokenInfo
  let aaid: String
  let attestationTypes: [UInt16]

  init(_ info: TokenInfo, configuration: Configuration) {
    tokenInfo = info
    let piv = info.kind == .piv
    aaid = piv ? configuration.pivAAID : configuration.fido2AAID
    let full = piv && configuration.attestationSlot.flatMap(PIVSlot.init(string:)) != nil
    attestationTypes = [full ? UAFConstant.attestationBasicFull : UAFConstant.attestationBasicSurrogate]
  }

  func describe(keyIDs: [String]) -> AuthenticatorDescription {
    AuthenticatorProfile.description(tokenInfo.kind, aaid: aaid, attestationTypes: attestationTypes, keyIDs: keyIDs)
  }

  func register(
    username: String, server: String, appID: String, finalChallengeHash: [UInt8], verifier: PinUserVerifier
  ) throws(OperationError) -> (assertion: [UInt8], keyID: String) {
    throw .unexpected("a token known only from a listing was asked to register")
  }

  func authenticate(
    record: AuthenticatorRecord, finalChallengeHash: [UInt8], transaction: (text: String, bytes: [UInt8])?,
    verifier: PinUserVerifier
  ) throws(OperationError) -> [UInt8] {
    throw .unexpected("a token known only from a listing was asked to sign")
  }

  func destroyKey(_ record: AuthenticatorRecord, verifier: PinUserVerifier) throws(OperationError) {
    throw .unexpected("a token known only from a listing was asked to delete a key")
  }
}
