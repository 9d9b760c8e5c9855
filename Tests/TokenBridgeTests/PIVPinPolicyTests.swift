import Testing
import TokenBridge
import TokenDevices
import UAFCore

/// The PIV PIN and PUK policies come from the one definition of PIV reference data's length (SP 800-73-4 Part 2
/// §2.4.3: 6 to 8 bytes), which the device layer pads to.
@Suite struct PIVPinPolicyTests {
  @Test func pinIsSixToEightDigits() {
    #expect(PinPolicy.pivPIN == PinPolicy(minLength: 6, maxLength: 8, digitsOnly: true))
    #expect(PinPolicy.pivPIN.validate(new: Array("12345".utf8)) == .tooShort(minimum: 6))
    #expect(PinPolicy.pivPIN.validate(new: Array("123456789".utf8)) == .tooLong(maximum: 8))
  }

  @Test func pukIsSixToEightBytesOfAnyValue() {
    #expect(PinPolicy.pivPUK == PinPolicy(minLength: 6, maxLength: 8, digitsOnly: false))
    #expect(PinPolicy.pivPUK.validate(new: Array("abcdef".utf8)) == nil)
  }
}
