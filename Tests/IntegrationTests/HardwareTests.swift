import Foundation
import Testing
import TokenDevices

/// Read-only checks on a real token, through the machine's own pcscd. Opt-in: TOKENBRIDGE_HIL=1 and the
/// token's serial in TOKENBRIDGE_HIL_SERIAL (an allow-list of one, so no other token is ever touched).
/// They never send a PIN. Run them with Tools/hil.
let hilSerial: UInt32? = {
  let env = ProcessInfo.processInfo.environment
  guard env["TOKENBRIDGE_HIL"] == "1", !hasPrivatePCSCD else { return nil }
  return env["TOKENBRIDGE_HIL_SERIAL"].flatMap(UInt32.init)
}()

@Suite(
  .serialized, .tags(.hardware),
  .enabled(
    if: hilSerial != nil, "hardware test: set TOKENBRIDGE_HIL=1 and TOKENBRIDGE_HIL_SERIAL, run Tools/hil"))
struct HardwareTests {
  func token() throws -> DiscoveredToken {
    let found = try TokenDiscovery().discover().found
    return try #require(found.first { $0.info.serial == hilSerial }, "token \(hilSerial!) is not attached")
  }

  @Test func readingTriesSpendsNone() throws {
    let t = try token()
    let first = try t.session.pinStatus(.pin)
    for _ in 0..<3 { #expect(try t.session.pinStatus(.pin).retriesLeft == first.retriesLeft) }
  }

  @Test func identityIsStable() throws {
    let a = try token().info
    let b = try token().info
    #expect(a.id == b.id && a.id == "piv-\(hilSerial!)")
  }
}
