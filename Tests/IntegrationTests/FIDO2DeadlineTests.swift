import Foundation
import Testing
import TokenDevices

#if canImport(Glibc)
  import Glibc
#endif

/// FIDO2 keys through the real libfido2 and custom I/O: a key that stops answering ends each call at the session's
/// deadline with `.noAnswer`, discovery reports it as unusable with that reason while the other keys are listed, and
/// NO_CREDENTIALS has its own case.
@Suite(.tags(.pcscd), .serialized, .enabled(if: hasPrivatePCSCD, "needs the private pcscd: run Tools/test"))
struct FIDO2DeadlineTests {
  /// Short deadlines keep the tests quick; what is checked is the outcome, never the time taken.
  static let quick = FIDO2Deadlines(probeMs: 500, commandMs: 500, userPresenceMs: 500)

  /// A key silent from the start fails the open (CTAPHID_INIT); one that answers INIT and then nothing fails the
  /// getInfo inside `fido_dev_open` (which libfido2 takes for a U2F key) and then the session's own getInfo, at
  /// the deadline (`FIDO2Session.open`).
  @Test func aSilentKeyEndsTheOpenWithNoAnswer() throws {
    let key = try ScriptedKey(mode: "silent")
    #expect(throws: TokenError.noAnswer(operation: "open")) { _ = try FIDO2Session(key.ref, deadlines: Self.quick) }
  }

  @Test func aKeySilentAfterINITEndsGetInfoWithNoAnswer() throws {
    let key = try ScriptedKey(mode: "after-init")
    #expect(throws: TokenError.noAnswer(operation: "getInfo")) { _ = try FIDO2Session(key.ref, deadlines: Self.quick) }
  }

  @Test func discoveryListsTheLiveKeyAndReportsTheSilentOne() throws {
    let stalled = try ScriptedKey(mode: "after-init")
    let live = try VirtualFIDO2Key()
    var discovery = TokenDiscovery(includePUK: false)
    discovery.virtualFIDO2Paths = [stalled.path, live.path]
    discovery.fido2Deadlines = Self.quick
    let result = try discovery.discover()
    #expect(result.fido2Found.map(\.info.id) == [TokenDiscovery.fido2ID(live.ref)])
    let unusable = result.unusableCards.filter { $0.reader == stalled.path }
    #expect(
      unusable == [
        UnusableToken(
          id: TokenDiscovery.fido2ID(stalled.ref), reader: stalled.path, reason: .noAnswer(operation: "getInfo"))
      ])
  }

  @Test func anUnknownCredentialIsNoCredentialNotAnEmptySlot() throws {
    let key = try VirtualFIDO2Key()
    let s = try FIDO2Session(key.ref)
    try s.setPIN(Array("1234".utf8), old: nil)
    #expect(throws: TokenError.noCredential(operation: "getAssertion")) {
      _ = try s.hmacSecret(
        rpID: "tokenbridge.test", clientDataHash: [UInt8](repeating: 1, count: 32),
        credentialID: [UInt8](repeating: 7, count: 64), salt: [UInt8](repeating: 2, count: 32), pin: Array("1234".utf8))
    }
  }
}

/// `virtual-token fido2` on its own socket and state file; stopped by pid.
final class VirtualFIDO2Key {
  let process = Process()
  let path: String
  let statePath: String
  var ref: FIDO2DeviceRef { FIDO2DeviceRef(path: path, product: "virtual FIDO2 key", isVirtual: true) }

  init() throws {
    let base = NSTemporaryDirectory() + "vfido-\(UUID().uuidString.prefix(8))"
    path = base + ".sock"
    statePath = base + ".json"
    process.executableURL = VirtualCard.binDir.appendingPathComponent("virtual-token")
    process.arguments = ["fido2", "--socket", path, "--state", statePath]
    process.standardError = FileHandle.nullDevice
    try process.run()
    try waitForFile(path)
  }

  deinit {
    process.terminate()
    process.waitUntilExit()
    unlink(path)
    unlink(statePath)
  }
}

struct FileTimeout: Error { let path: String }

func waitForFile(_ path: String) throws {
  for _ in 0..<200 {
    if FileManager.default.fileExists(atPath: path) { return }
    usleep(50_000)
  }
  throw FileTimeout(path: path)
}
