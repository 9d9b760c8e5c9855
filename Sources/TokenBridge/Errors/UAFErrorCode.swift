/// The FIDO UAF Application API's error codes (UAF Client API §3.1.1), what `tokenbridge serve` answers with
/// (docs/dbus-api.md, "Errors").
public enum UAFErrorCode: UInt32, Sendable, CaseIterable {
  case noError = 0x00
  case waitUserAction = 0x01
  case insecureTransport = 0x02
  case userCancelled = 0x03
  case unsupportedVersion = 0x04
  case noSuitableAuthenticator = 0x05
  case protocolError = 0x06
  case untrustedFacetID = 0x07
  case keyDisappearedPermanently = 0x09
  case authenticatorAccessDenied = 0x0C
  case invalidTransactionContent = 0x0D
  case userNotResponsive = 0x0E
  case insufficientAuthenticatorResources = 0x0F
  case userLockout = 0x10
  case userNotEnrolled = 0x11
  case unknown = 0xFF

  /// The code for an outcome of the CLI's operations: the error itself where it says more than its exit status
  /// (an unsupported version, transaction content), else its exit status (README, "Exit codes").
  public init(_ error: Error) {
    switch error {
    case OperationError.message(.unsupportedVersion): self = .unsupportedVersion
    case OperationError.message(.unknownExtension): self = .unknown
    case OperationError.transaction: self = .invalidTransactionContent
    case OperationError.input(.badChannelBinding): self = .protocolError
    case OperationError.configuration(.noFacetID): self = .untrustedFacetID
    default: self.init(ErrorReport(error).status)
    }
  }

  public init(_ status: ExitStatus) {
    switch status {
    case .success: self = .noError
    case .cancelled, .declined: self = .userCancelled
    case .timedOut: self = .userNotResponsive
    case .pinBlocked, .pukBlocked: self = .userLockout
    case .pinNotSet: self = .userNotEnrolled
    case .noToken, .noSuitableAuthenticator, .unsupportedToken, .serviceUnavailable: self = .noSuitableAuthenticator
    case .untrustedFacet: self = .untrustedFacetID
    case .badMessage, .payloadMalformed: self = .protocolError
    case .unknownKey: self = .keyDisappearedPermanently
    default: self = .unknown
    }
  }
}
