import Foundation
import Testing
import TokenDevices

/// getInfo once per command: the answer to the getInfo libfido2 sends while opening is kept by our custom I/O,
/// and it is what libfido2's own parse of a getInfo says (`refreshInfo`, `fido_dev_get_cbor_info`).
@Suite(.serialized, .enabled(if: hasPrivatePCSCD, "needs the private pcscd: run Tools/test"))
struct FIDO2GetInfoCaptureTests {
  @Test func theOpensGetInfoIsKeptAndMatchesLibfido2s() throws {
    let key = try VirtualFIDO2Key()
    let s = try FIDO2Session(key.ref)
    #expect(s.infoFromOpen)
    let captured = try s.info()
    #expect(captured.extensions == ["hmac-secret"] && captured.aaguid.count == 32 && !captured.pinIsSet)
    #expect(try s.refreshInfo() == captured)
  }

  @Test func aPINSetWithinTheCommandIsSeenAndAReopenCapturesAgain() throws {
    let key = try VirtualFIDO2Key()
    let s = try FIDO2Session(key.ref)
    #expect(try !s.info().pinIsSet)
    try s.setPIN(Array("12345678".utf8), old: nil)
    #expect(!s.infoFromOpen)
    #expect(try s.info().pinIsSet)  // asked again: the PIN is set now
    try s.reopen()
    #expect(s.infoFromOpen)
    #expect(try s.info().pinIsSet)
  }
}
