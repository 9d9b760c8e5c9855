import Foundation
import Testing

@testable import TokenDevices

/// getInfo once per command, and the same answer on every path: the session's own channel (`CTAP2Link`, what
/// commands use), the answer to the getInfo libfido2 sends while opening (captured by our custom I/O, when a call
/// needs libfido2 before anything read getInfo) and libfido2's own parse (`fido_dev_get_cbor_info`).
@Suite(.serialized, .enabled(if: hasPrivatePCSCD, "needs the private pcscd: run Tools/test"))
struct FIDO2GetInfoCaptureTests {
  @Test func theOwnChannelsGetInfoIsKeptAndMatchesLibfido2s() throws {
    let key = try VirtualFIDO2Key()
    let s = try FIDO2Session(key.ref)
    #expect(s.infoIfRead == nil)  // opening sent CTAPHID_INIT only
    let own = try s.info()
    #expect(own.extensions == ["hmac-secret"] && own.aaguid.count == 32 && !own.pinIsSet)
    #expect(s.dev == nil && !s.infoFromOpen)
    _ = try s.device()  // libfido2 takes over the key; what was read stays known
    #expect(s.link == nil && s.infoIfRead == own)
    #expect(try s.refreshInfo() == own)  // libfido2's parse of a getInfo of its own
  }

  @Test func libfido2sOpenIsCapturedWhenNothingReadGetInfoBefore() throws {
    let key = try VirtualFIDO2Key()
    let own = try FIDO2Session(key.ref).info()
    let s = try FIDO2Session(key.ref)
    _ = try s.device()
    #expect(s.infoFromOpen)
    #expect(try s.info() == own)
  }

  @Test func aPINSetWithinTheCommandIsSeenAndAReopenReadsAgain() throws {
    let key = try VirtualFIDO2Key()
    let s = try FIDO2Session(key.ref)
    #expect(try !s.info().pinIsSet)
    try s.setPIN(Array("12345678".utf8), old: nil)
    #expect(s.infoIfRead == nil)
    #expect(try s.info().pinIsSet)  // asked again: the PIN is set now
    try s.reopen()
    #expect(s.link != nil && s.infoIfRead == nil)
    #expect(try s.info().pinIsSet)
  }
}
