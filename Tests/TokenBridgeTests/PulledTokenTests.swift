import Testing
import TokenDevices

@testable import TokenBridge

/// Found by the lab's pull sweep (Tests/lab/test_pull_sweep.py): a FIDO2 key pulled while it was being probed (its
/// CTAPHID_INIT, getInfo or getPINRetries) was the only candidate, and the command ended "No usable token found" with
/// exit 11 (a token we cannot use) although the message said it was removed.
@Suite struct PulledTokenTests {
  static let removed = UnusableToken(
    id: "fido2-hidraw0", reader: "/dev/hidraw0", reason: .smartCard(.cardRemoved(reader: "/dev/hidraw0")))

  @Test func aTokenPulledWhileProbedIsARemoval() {
    let reason = TokenSelection.pulled([Self.removed])
    #expect(reason == .smartCard(.cardRemoved(reader: "/dev/hidraw0")))
    #expect(ErrorReport.operation(.token(reason!)).status == .tokenRemoved)
  }

  @Test func anotherUnusableTokenBesideItKeepsTheList() {
    let other = UnusableToken(id: "fido2-hidraw1", reader: "/dev/hidraw1", reason: .unsupported("FIDO2"))
    #expect(TokenSelection.pulled([Self.removed, other]) == nil)
    #expect(TokenSelection.pulled([]) == nil)
  }
}
