import Synchronization
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

  /// `--wait`: a token pulled while discovery probed it is no token yet: the command waits on, and goes on with the
  /// token that comes (it failed "removed", exit 10, before).
  @Test func aWaitingCommandWaitsOnWhenTheOnlyTokenWasPulledWhileProbed() throws {
    let told = Mutex(0)
    var wait = TokenWait(seconds: 20, insertToken: { _ in told.withLock { $0 += 1 } })
    wait.relookSeconds = 0.05
    var attempts = 0
    let found = try wait.retrying(id: nil) { () throws(OperationError) -> String in
      attempts += 1
      guard attempts > 1 else { throw .token(Self.removed.reason) }
      return "fido2-hidraw0"
    }
    #expect(found == "fido2-hidraw0" && attempts == 2 && told.withLock { $0 } == 1)
  }
}
