import Testing
import TokenBridge
import UAFCore

@testable import TokenBridgeService

@Suite struct UAFErrorCodeTests {
  /// UAF Client API §3.1 ErrorCode: a malformed message is PROTOCOL_ERROR, no version spoken UNSUPPORTED_VERSION,
  /// an extension the authenticators cannot honour UNKNOWN (the ASM's UAF_ASM_STATUS_ERROR, Protocol §3.4.6.2.1).
  @Test func refusalsCarryTheClientAPICodes() {
    #expect(UAFErrorCode(OperationError.message(.unknownExtension(request: 0, id: "x"))) == .unknown)
    #expect(UAFErrorCode(OperationError.message(.unsupportedVersion([]))) == .unsupportedVersion)
    for rule in [UAFFieldRule.notEmpty, .aaidCombinedWith("vendorID"), .contentType, .textLength(max: 200)] {
      #expect(UAFErrorCode(OperationError.message(.invalidField(request: 0, field: "f", rule: rule))) == .protocolError)
    }
  }
}
